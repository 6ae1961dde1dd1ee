package tracker

import (
	"net/netip"
	"reflect"
	"testing"

	"homework/endhost-agent/internal/flow"
)

var (
	web = flow.Tuple{Proto: flow.TCP, Local: netip.MustParseAddrPort("10.2.0.10:40000"), Remote: netip.MustParseAddrPort("93.184.216.34:443")}
	sip = flow.Tuple{Proto: flow.UDP, Local: netip.MustParseAddrPort("10.2.0.10:5060")}
)

// namer answers from a fixed process table and records what it was asked.
type namer struct {
	table map[uint64]string
	asked []uint64
}

func (n *namer) name(owners []uint64) map[uint64]string {
	n.asked = append(n.asked, owners...)
	out := map[uint64]string{}
	for _, o := range owners {
		if p, ok := n.table[o]; ok {
			out[o] = p
		}
	}
	return out
}

func TestNewConnectionIsReportedOnce(t *testing.T) {
	tr := New()
	n := &namer{table: map[uint64]string{42: "firefox"}}
	scan := []flow.Socket{{Tuple: web, Owner: 42}}
	want := []flow.Report{{Tuple: web, Program: "firefox"}}
	if got := tr.Observe(scan, n.name); !reflect.DeepEqual(got, want) {
		t.Fatalf("first scan reported %v, want %v", got, want)
	}
	for i := 0; i < 3; i++ {
		if got := tr.Observe(scan, n.name); len(got) != 0 {
			t.Fatalf("scan %d re-reported an unchanged connection: %v", i+2, got)
		}
	}
	if !reflect.DeepEqual(n.asked, []uint64{42}) {
		t.Fatalf("the owner was looked up %v times, want once (cached)", n.asked)
	}
}

func TestClosedAndReopenedTupleIsReportedAgain(t *testing.T) {
	n := &namer{table: map[uint64]string{42: "firefox", 43: "curl"}}
	// Closed (absent from two scans), then the same tuple again by a new socket.
	tr := New()
	tr.Observe([]flow.Socket{{Tuple: web, Owner: 42}}, n.name)
	for i := 0; i < 2; i++ {
		if got := tr.Observe(nil, n.name); len(got) != 0 {
			t.Fatalf("closing reported %v", got)
		}
	}
	if tr.Live() != 0 {
		t.Fatalf("a connection absent from two scans is still tracked (%d)", tr.Live())
	}
	want := []flow.Report{{Tuple: web, Program: "curl"}}
	if got := tr.Observe([]flow.Socket{{Tuple: web, Owner: 43}}, n.name); !reflect.DeepEqual(got, want) {
		t.Fatalf("reopened tuple reported %v, want %v", got, want)
	}
	// Closed and reopened between two scans: the tuple is the same, the socket (owner) is new.
	tr = New()
	tr.Observe([]flow.Socket{{Tuple: web, Owner: 42}}, n.name)
	want = []flow.Report{{Tuple: web, Program: "curl"}}
	if got := tr.Observe([]flow.Socket{{Tuple: web, Owner: 43}}, n.name); !reflect.DeepEqual(got, want) {
		t.Fatalf("tuple reused by a new socket reported %v, want %v", got, want)
	}
}

// A dump of a busy table that misses a live socket once must not make it look new.
func TestSocketMissingFromOneScanIsNotReportedAgain(t *testing.T) {
	tr := New()
	n := &namer{table: map[uint64]string{42: "firefox"}}
	scan := []flow.Socket{{Tuple: web, Owner: 42}}
	tr.Observe(scan, n.name)
	tr.Observe(nil, n.name) // missed
	if got := tr.Observe(scan, n.name); len(got) != 0 {
		t.Fatalf("a socket missed by one dump was reported again: %v", got)
	}
	if len(n.asked) != 1 {
		t.Fatalf("its owner was looked up %d times, want once", len(n.asked))
	}
}

func TestUnconnectedUDPIsKeyedOnLocalPort(t *testing.T) {
	tr := New()
	n := &namer{table: map[uint64]string{7: "linphone"}}
	unconnected := sip
	unconnected.Remote = netip.MustParseAddrPort("0.0.0.0:0") // how the kernel's table shows it
	want := []flow.Report{{Tuple: unconnected, Program: "linphone"}}
	if got := tr.Observe([]flow.Socket{{Tuple: unconnected, Owner: 7}}, n.name); !reflect.DeepEqual(got, want) {
		t.Fatalf("unconnected UDP reported %v, want %v", got, want)
	}
	// The same socket seen without the placeholder peer is the same connection: no new report.
	if got := tr.Observe([]flow.Socket{{Tuple: sip, Owner: 7}}, n.name); len(got) != 0 {
		t.Fatalf("the same local port was reported again: %v", got)
	}
	// Once connected it has a full tuple: a new connection as far as the router is concerned.
	connected := sip
	connected.Remote = netip.MustParseAddrPort("212.27.40.240:5060")
	want = []flow.Report{{Tuple: connected, Program: "linphone"}}
	if got := tr.Observe([]flow.Socket{{Tuple: connected, Owner: 7}}, n.name); !reflect.DeepEqual(got, want) {
		t.Fatalf("connected UDP reported %v, want %v", got, want)
	}
}

// A process that connects and exits: its TCP connection lingers in the kernel's table with no
// owner, and must neither be re-reported nor lose its name. And a socket handed on by a process
// that has exited (e.g. ssh forking into the background) is named from the cache, without
// another /proc walk that could no longer find the process that opened it.
func TestShortLivedProcessKeepsItsNameFromTheCache(t *testing.T) {
	tr := New()
	n := &namer{table: map[uint64]string{42: "ssh"}}
	tr.Observe([]flow.Socket{{Tuple: sip, Owner: 42}}, n.name)

	delete(n.table, 42) // the process that opened socket 42 has exited
	n.asked = nil
	connected := sip
	connected.Remote = netip.MustParseAddrPort("192.0.2.80:22")
	want := []flow.Report{{Tuple: connected, Program: "ssh"}}
	if got := tr.Observe([]flow.Socket{{Tuple: connected, Owner: 42}}, n.name); !reflect.DeepEqual(got, want) {
		t.Fatalf("after its process exited, the socket was reported as %v, want %v", got, want)
	}
	if len(n.asked) != 0 {
		t.Fatalf("a cached owner was looked up again: %v", n.asked)
	}
	// The connection now outlives every process that held it (owner 0 in the kernel's table).
	if got := tr.Observe([]flow.Socket{{Tuple: connected, Owner: 0}}, n.name); len(got) != 0 || tr.Live() != 1 {
		t.Fatalf("orphaned connection: reported %v, live %d; want nothing new, still live", got, tr.Live())
	}
}

// A connection whose process exited before anyone could name it is not reported (the router
// falls back to its DNS and port rules) and is not looked up again on every scan; a socket
// whose owner turns up later (passed to a live process) is reported then.
func TestUnnamedOwnerIsLookedUpOnceAndReportedWhenNamed(t *testing.T) {
	tr := New()
	n := &namer{table: map[uint64]string{}}
	scan := []flow.Socket{{Tuple: web, Owner: 42}}
	for i := 0; i < 3; i++ {
		if got := tr.Observe(scan, n.name); len(got) != 0 {
			t.Fatalf("an unnamed connection was reported: %v", got)
		}
	}
	if !reflect.DeepEqual(n.asked, []uint64{42}) {
		t.Fatalf("unnamed owner looked up %v, want once", n.asked)
	}
	// Positive control: a new socket whose owner is found is reported on the next scan.
	n.table[43] = "curl"
	scan = append(scan, flow.Socket{Tuple: sip, Owner: 43})
	want := []flow.Report{{Tuple: sip, Program: "curl"}}
	if got := tr.Observe(scan, n.name); !reflect.DeepEqual(got, want) {
		t.Fatalf("reported %v, want %v", got, want)
	}
}

// Sockets sharing one key (SO_REUSEPORT) count as one connection and do not flap.
func TestSocketsSharingAKeyAreOneConnection(t *testing.T) {
	tr := New()
	n := &namer{table: map[uint64]string{7: "dnsmasq", 8: "dnsmasq"}}
	scan := []flow.Socket{{Tuple: sip, Owner: 7}, {Tuple: sip, Owner: 8}}
	if got := tr.Observe(scan, n.name); len(got) != 1 {
		t.Fatalf("first scan reported %v, want one report", got)
	}
	if got := tr.Observe(scan, n.name); len(got) != 0 {
		t.Fatalf("second scan reported %v, want nothing", got)
	}
}
