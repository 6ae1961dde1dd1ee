package agent

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"homework/endhost-agent/internal/flow"
)

// table is a fixed connection table; it records which owners it was asked to name.
type table struct {
	sockets []flow.Socket
	names   map[uint64]string
	asked   []uint64
}

func (t *table) Name() string                                   { return "table" }
func (t *table) Sockets(context.Context) ([]flow.Socket, error) { return slices.Clone(t.sockets), nil }
func (t *table) Programs(owners []uint64) map[uint64]string {
	t.asked = append(t.asked, owners...)
	return t.names
}

func tuple(p flow.Proto, local, remote string) flow.Tuple {
	return flow.Tuple{Proto: p, Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort(remote)}
}

// Connections that stay inside the computer or on the local link are never reported, and
// their programs are not even looked up.
func TestScanNamesAndReportsOnlyConnectionsThroughTheRouter(t *testing.T) {
	src := &table{
		sockets: []flow.Socket{
			{Tuple: tuple(flow.TCP, "10.2.0.10:40000", "93.184.216.34:443"), Owner: 1},
			{Tuple: tuple(flow.TCP, "127.0.0.1:40001", "127.0.0.1:631"), Owner: 2},
			{Tuple: tuple(flow.UDP, "10.2.0.10:40002", "10.2.0.9:53"), Owner: 3},
			{Tuple: tuple(flow.UDP, "0.0.0.0:5060", "0.0.0.0:0"), Owner: 4},
		},
		names: map[uint64]string{1: "firefox", 2: "cups-browsed", 3: "systemd-resolved", 4: "linphone"},
	}
	scope := flow.Scope{Self: netip.MustParseAddr("10.2.0.10"), OnLink: netip.MustParsePrefix("10.2.0.8/30")}
	a := New(src, scope, slog.New(slog.NewTextHandler(io.Discard, nil)))
	got, err := a.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(x, y flow.Report) int { return int(x.Tuple.Local.Port()) - int(y.Tuple.Local.Port()) })
	want := []flow.Report{
		{Tuple: flow.Tuple{Proto: flow.UDP, Local: netip.MustParseAddrPort("10.2.0.10:5060")}, Program: "linphone"},
		{Tuple: tuple(flow.TCP, "10.2.0.10:40000", "93.184.216.34:443"), Program: "firefox"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reported %v, want %v", got, want)
	}
	slices.Sort(src.asked)
	if !reflect.DeepEqual(src.asked, []uint64{1, 4}) {
		t.Fatalf("looked up owners %v, want only those through the router (1, 4)", src.asked)
	}
}

// recorder is a Sink that keeps what it was given.
type recorder struct {
	mu      sync.Mutex
	reports []flow.Report
	targets []string
}

func (r *recorder) Add(reports ...flow.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, reports...)
}

func (r *recorder) Flush() error { return nil }

func (r *recorder) Retarget(server, local string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.targets) == 0 || r.targets[len(r.targets)-1] != server+" from "+local {
		r.targets = append(r.targets, server+" from "+local)
	}
}

func (r *recorder) programs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rep := range r.reports {
		out = append(out, rep.Program)
	}
	return out
}

// A laptop that gets a new lease (or moves to another network) reports its connections from
// the new address to the router it now goes through, and stops cleanly when told to.
func TestRunFollowsTheRouterAndStopsWhenCancelled(t *testing.T) {
	src := &table{
		sockets: []flow.Socket{
			{Tuple: tuple(flow.TCP, "10.2.0.10:40000", "1.1.1.1:443"), Owner: 1},
			{Tuple: tuple(flow.TCP, "10.2.0.14:40001", "1.1.1.1:443"), Owner: 2},
		},
		names: map[uint64]string{1: "firefox", 2: "curl"},
	}
	before := flow.Scope{Self: netip.MustParseAddr("10.2.0.10"), OnLink: netip.MustParsePrefix("10.2.0.8/30")}
	after := flow.Scope{Self: netip.MustParseAddr("10.2.0.14"), OnLink: netip.MustParsePrefix("10.2.0.12/30")}
	var mu sync.Mutex
	locations := 0
	locate := func() (flow.Scope, string, error) {
		mu.Lock()
		defer mu.Unlock()
		if locations++; locations <= 3 {
			return before, "10.2.0.9:987", nil
		}
		return after, "10.2.0.13:987", nil
	}
	a := New(src, before, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sink := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, Options{Interval: time.Millisecond, Locate: locate}, sink) }()

	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(sink.programs(), "curl") {
		if time.Now().After(deadline) {
			t.Fatalf("no report from the new address; reports %v", sink.programs())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
	if got := sink.programs(); !reflect.DeepEqual(got, []string{"firefox", "curl"}) {
		t.Fatalf("reports %v, want firefox (old address) then curl (new address), once each", got)
	}
	want := []string{"10.2.0.9:987 from 10.2.0.10:0", "10.2.0.13:987 from 10.2.0.14:0"}
	if !reflect.DeepEqual(sink.targets, want) {
		t.Fatalf("reported to %v, want %v", sink.targets, want)
	}
}
