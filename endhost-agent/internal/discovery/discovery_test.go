package discovery

import (
	"net/netip"
	"testing"
)

func TestOnLinkPrefixIsTheInterfaceHoldingOurAddress(t *testing.T) {
	prefixes := []netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/8"),
		netip.MustParsePrefix("10.2.0.10/30"), // a Homework lease
		netip.MustParsePrefix("172.16.0.5/24"),
	}
	if got := onLinkPrefix(netip.MustParseAddr("10.2.0.10"), prefixes); got != netip.MustParsePrefix("10.2.0.8/30") {
		t.Fatalf("on-link prefix %v, want 10.2.0.8/30", got)
	}
	if got := onLinkPrefix(netip.MustParseAddr("192.0.2.7"), prefixes); got != netip.MustParsePrefix("192.0.2.7/32") {
		t.Fatalf("address on no interface: prefix %v, want the address alone", got)
	}
}

// With an explicit gateway, the address towards it comes from the routing table: for a
// loopback "router", loopback.
func TestFindWithAGivenGateway(t *testing.T) {
	r, err := Find(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Scope.Self != netip.MustParseAddr("127.0.0.1") || !r.Scope.OnLink.Contains(netip.MustParseAddr("127.0.0.53")) {
		t.Fatalf("router %+v: want self 127.0.0.1 on 127.0.0.0/8", r)
	}
	if r.HWDB() != "127.0.0.1:987" {
		t.Fatalf("hwdb address %s", r.HWDB())
	}
}
