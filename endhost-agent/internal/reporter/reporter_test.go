package reporter

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"homework/endhost-agent/internal/agenterr"
	"homework/endhost-agent/internal/flow"
	"homework/endhost-agent/internal/hwdbtest"
	"homework/endhost-agent/internal/pairing"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func report(proto flow.Proto, local, remote, program string) flow.Report {
	t := flow.Tuple{Proto: proto, Local: netip.MustParseAddrPort(local)}
	if remote != "" {
		t.Remote = netip.MustParseAddrPort(remote)
	}
	return flow.Report{Tuple: t, Program: program}
}

func TestRowsQuoteNamesAndMarkUnconnectedUDP(t *testing.T) {
	got := Row(report(flow.UDP, "10.2.0.10:5060", "", "o'phone"), "ann's laptop")
	want := `(17,'10.2.0.10',5060,'*',0,'o''phone','ann''s laptop')`
	if got != want {
		t.Fatalf("row %s, want %s", got, want)
	}
}

func TestStatementsStayUnderTheLANLimit(t *testing.T) {
	var reports []flow.Report
	for i := 0; i < 2000; i++ {
		reports = append(reports, report(flow.TCP, fmt.Sprintf("10.2.0.10:%d", 10000+i), "93.184.216.34:443", "firefox"))
	}
	total := 0
	for rest := reports; len(rest) > 0; {
		stmt, n := Statement(rest, "laptop")
		if len(stmt) > MaxStatementBytes || n == 0 {
			t.Fatalf("statement of %d rows is %d bytes (limit %d)", n, len(stmt), MaxStatementBytes)
		}
		rest = rest[n:]
		total += n
	}
	if total != len(reports) {
		t.Fatalf("statements hold %d rows, want %d", total, len(reports))
	}
}

// The agent's reports about its own address arrive in AppTuples, in several statements when
// there are more than one LAN statement holds; a report about another address is refused by
// the router and does not arrive, and the refusal does not block later reports.
func TestReportsArriveAndForgedOnesAreRefused(t *testing.T) {
	addr := hwdbtest.StartReady(t)
	r := New(addr, hwdbtest.LANPeer+":0", "laptop", &hwdbtest.Key, quiet)

	own := []flow.Report{
		report(flow.TCP, "127.0.0.2:40000", "93.184.216.34:443", "firefox"),
		report(flow.UDP, "127.0.0.2:5060", "", "linphone"),
	}
	r.Add(own...)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	want := []string{"[6 127.0.0.2 40000 93.184.216.34 443 firefox laptop]", "[17 127.0.0.2 5060 * 0 linphone laptop]"}
	if got := hwdbtest.AppTuples(t, addr); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("AppTuples holds %q, want %q", got, want)
	}

	r.Add(report(flow.TCP, "127.0.0.3:40001", "93.184.216.34:443", "firefox")) // another host's address
	err := r.Flush()
	if agenterr.KindOf(err) != agenterr.Refused || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("forged report: err %v, want a refusal (forbidden)", err)
	}
	if r.Queued() != 0 {
		t.Fatalf("a refused report stays queued (%d) and would be retried forever", r.Queued())
	}

	var many []flow.Report
	for i := 0; i < 1500; i++ {
		many = append(many, report(flow.TCP, fmt.Sprintf("127.0.0.2:%d", 20000+i), "1.1.1.1:443", "backup"))
	}
	r.Add(many...)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	got := hwdbtest.AppTuples(t, addr)
	if len(got) != len(want)+len(many) {
		t.Fatalf("AppTuples holds %d rows, want %d (no forged row, all 1500 batched ones)", len(got), len(want)+len(many))
	}
	for _, row := range got {
		if strings.Contains(row, "127.0.0.3") {
			t.Fatalf("forged row arrived: %s", row)
		}
	}
	r.Close()
}

// While the router does not answer, reports wait; once it answers they are delivered.
func TestReportsWaitForAnUnreachableRouter(t *testing.T) {
	addr := hwdbtest.FreeAddr(t)
	r := New(addr, hwdbtest.LANPeer+":0", "laptop", &hwdbtest.Key, quiet)
	r.Timeout = 300 * time.Millisecond
	r.Add(report(flow.TCP, "127.0.0.2:40000", "93.184.216.34:443", "firefox"))
	if err := r.Flush(); agenterr.KindOf(err) != agenterr.Transient || r.Queued() != 1 {
		t.Fatalf("with no server: err %v, queued %d; want a transient error and the report kept", err, r.Queued())
	}

	hwdbtest.Start(t, addr)
	deadline := time.Now().Add(10 * time.Second)
	for r.Flush() != nil {
		if time.Now().After(deadline) {
			t.Fatal("reports never delivered after the server started")
		}
	}
	// At least once: an attempt whose answer came too late (a loaded machine, a server still
	// starting) was executed and is sent again on a new connection, so the report may be there
	// twice. Rows are idempotent for the router (the same tuple names the same program).
	got := hwdbtest.AppTuples(t, addr)
	if len(got) == 0 {
		t.Fatal("AppTuples is empty, want the waiting report")
	}
	for _, row := range got {
		if row != got[0] || !strings.Contains(row, "firefox") {
			t.Fatalf("AppTuples holds %q, want the waiting report (at least once, nothing else)", got)
		}
	}
	r.Close()
}

// A router that cannot prove it holds the household's key (another household's, or a wrong
// --router-key) is sent nothing, and the agent says why once; the same reports to the paired
// router arrive (the positive control is TestReportsArriveAndForgedOnesAreRefused).
func TestNothingIsReportedToARouterThatIsNotPaired(t *testing.T) {
	addr := hwdbtest.StartReady(t)
	wrong := hwdbtest.Key
	wrong[0] ^= 1
	for name, key := range map[string]*pairing.Key{"a wrong key": &wrong, "no key": nil} {
		var logs strings.Builder
		r := New(addr, hwdbtest.LANPeer+":0", "laptop", key, slog.New(slog.NewTextHandler(&logs, nil)))
		r.Add(report(flow.TCP, "127.0.0.2:40000", "93.184.216.34:443", "firefox"))
		err := r.Flush()
		if agenterr.KindOf(err) != agenterr.Refused || !strings.Contains(err.Error(), Unpaired) || !strings.HasSuffix(err.Error(), PairingHint) {
			t.Fatalf("%s: err %v, want a refusal that says the router is not paired and what to do", name, err)
		}
		r.Add(report(flow.TCP, "127.0.0.2:40001", "93.184.216.34:443", "firefox"))
		if err := r.Flush(); err != nil || r.Queued() != 0 {
			t.Fatalf("%s: later flush: err %v, queued %d; want nothing said again and nothing kept", name, err, r.Queued())
		}
		if got := hwdbtest.AppTuples(t, addr); len(got) != 0 {
			t.Fatalf("%s: reports reached a router that is not paired: %q", name, got)
		}
		r.Close()
	}
	r := New(addr, hwdbtest.LANPeer+":0", "laptop", &hwdbtest.Key, quiet)
	r.Add(report(flow.TCP, "127.0.0.2:40002", "93.184.216.34:443", "firefox"))
	if err := r.Flush(); err != nil || len(hwdbtest.AppTuples(t, addr)) != 1 {
		t.Fatalf("with the right key: err %v, AppTuples %q", err, hwdbtest.AppTuples(t, addr))
	}
	r.Close()
}

// Past the router's row rate for this computer (a start-up scan larger than its burst), the
// reporter pauses instead of asking again at every scan, keeps what is queued, and delivers
// all of it once the rate allows.
func TestABusyRouterIsGivenAPauseAndEveryReportArrives(t *testing.T) {
	addr := hwdbtest.StartReady(t)
	r := New(addr, hwdbtest.LANPeer+":0", "laptop", &hwdbtest.Key, quiet)
	const total = 3000 // more than hwdb's burst of 2000 rows
	var many []flow.Report
	for i := 0; i < total; i++ {
		many = append(many, report(flow.TCP, fmt.Sprintf("127.0.0.2:%d", 10000+i), "1.1.1.1:443", "backup"))
	}
	r.Add(many...)
	err := r.Flush()
	if agenterr.KindOf(err) != agenterr.Transient || !strings.Contains(err.Error(), "busy:") {
		t.Fatalf("err %v, want the router's busy answer", err)
	}
	waiting := r.Queued()
	if waiting == 0 || waiting == total {
		t.Fatalf("%d of %d reports wait; want the burst delivered and the rest kept", waiting, total)
	}
	// Asked again at once (the next scan), it sends nothing: the pause has not passed.
	if err := r.Flush(); err != nil || r.Queued() != waiting {
		t.Fatalf("flush during the pause: err %v, queued %d (was %d)", err, r.Queued(), waiting)
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.Queued() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d reports still wait", r.Queued())
		}
		_ = r.Flush()
		time.Sleep(100 * time.Millisecond)
	}
	if got := len(hwdbtest.AppTuples(t, addr)); got != total {
		t.Fatalf("AppTuples holds %d rows, want %d", got, total)
	}
	r.Close()
}

// A laptop that moves from its home to another network: the router it now reports to must
// prove the key again, and another household's router cannot, so it is told nothing; back
// home, reports arrive again.
func TestAnotherRouterMustProveTheKeyAgain(t *testing.T) {
	home := hwdbtest.StartReady(t)
	other := hwdbtest.Key
	other[5] ^= 0xff
	elsewhere := hwdbtest.StartReadyHolding(t, other)
	r := New(home, hwdbtest.LANPeer+":0", "laptop", &hwdbtest.Key, quiet)
	send := func(port int) error {
		r.Add(report(flow.TCP, fmt.Sprintf("127.0.0.2:%d", port), "93.184.216.34:443", "firefox"))
		return r.Flush()
	}
	if err := send(40000); err != nil || len(hwdbtest.AppTuples(t, home)) != 1 {
		t.Fatalf("at home: err %v, AppTuples %q", err, hwdbtest.AppTuples(t, home))
	}
	r.Retarget(elsewhere, hwdbtest.LANPeer+":0")
	if err := send(40001); !strings.Contains(fmt.Sprint(err), Unpaired) {
		t.Fatalf("elsewhere: err %v, want not paired", err)
	}
	if got := hwdbtest.AppTuples(t, elsewhere); len(got) != 0 {
		t.Fatalf("another household's router was told %q", got)
	}
	r.Retarget(home, hwdbtest.LANPeer+":0")
	if err := send(40002); err != nil || len(hwdbtest.AppTuples(t, home)) != 2 {
		t.Fatalf("back home: err %v, AppTuples %q", err, hwdbtest.AppTuples(t, home))
	}
	r.Close()
}
