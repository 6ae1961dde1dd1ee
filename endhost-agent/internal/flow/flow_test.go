package flow

import (
	"net/netip"
	"testing"
)

func tuple(p Proto, local, remote string) Tuple {
	t := Tuple{Proto: p, Local: netip.MustParseAddrPort(local)}
	if remote != "" {
		t.Remote = netip.MustParseAddrPort(remote)
	}
	return t
}

// Only connections that leave through the router are reported, rewritten to the address the
// router knows this host by; the rest (loopback, other interfaces, the local link) stay private.
func TestScopeReportsOnlyConnectionsThroughTheRouter(t *testing.T) {
	s := Scope{Self: netip.MustParseAddr("10.2.0.10"), OnLink: netip.MustParsePrefix("10.2.0.8/30")}
	cases := []struct {
		name    string
		in      Tuple
		through bool
		want    Tuple
	}{
		{"tcp to the internet", tuple(TCP, "10.2.0.10:40000", "93.184.216.34:443"), true, tuple(TCP, "10.2.0.10:40000", "93.184.216.34:443")},
		{"ipv4-mapped dual-stack socket", tuple(TCP, "[::ffff:10.2.0.10]:40001", "[::ffff:1.1.1.1]:443"), true, tuple(TCP, "10.2.0.10:40001", "1.1.1.1:443")},
		{"unconnected udp on the wildcard", tuple(UDP, "0.0.0.0:5060", "0.0.0.0:0"), true, tuple(UDP, "10.2.0.10:5060", "")},
		{"unconnected udp on our address", tuple(UDP, "10.2.0.10:5061", "0.0.0.0:0"), true, tuple(UDP, "10.2.0.10:5061", "")},
		{"loopback", tuple(TCP, "127.0.0.1:40002", "127.0.0.1:8080"), false, Tuple{}},
		{"another interface (a VPN)", tuple(TCP, "172.16.0.5:40003", "1.1.1.1:443"), false, Tuple{}},
		{"the gateway itself, on the link", tuple(UDP, "10.2.0.10:40004", "10.2.0.9:53"), false, Tuple{}},
		{"a tcp listener on the wildcard", tuple(TCP, "0.0.0.0:22", "0.0.0.0:0"), false, Tuple{}},
		{"a tcp listener on our address", tuple(TCP, "10.2.0.10:22", ""), false, Tuple{}},
		{"a connection accepted by it", tuple(TCP, "10.2.0.10:22", "198.51.100.4:50000"), true, tuple(TCP, "10.2.0.10:22", "198.51.100.4:50000")},
	}
	for _, c := range cases {
		got, ok := s.Through(c.in)
		if ok != c.through {
			t.Errorf("%s: through = %v, want %v", c.name, ok, c.through)
		}
		if ok && got != c.want {
			t.Errorf("%s: reported as %v, want %v", c.name, got, c.want)
		}
	}
}

func TestUnconnectedUDPIsKeyedOnItsLocalPort(t *testing.T) {
	a := tuple(UDP, "10.2.0.10:5060", "0.0.0.0:0")
	b := tuple(UDP, "10.2.0.10:5060", "")
	if a.Key() != b.Key() {
		t.Fatalf("same local port, different keys: %v vs %v", a.Key(), b.Key())
	}
	connected := tuple(UDP, "10.2.0.10:5060", "8.8.8.8:53")
	if connected.Key() == a.Key() {
		t.Fatal("a connected UDP socket must be keyed on its full tuple")
	}
}
