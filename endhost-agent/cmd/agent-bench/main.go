//go:build linux

// Command agent-bench measures the agent on Linux with many open connections: the cost of a
// scan (sock_diag plus the cached /proc lookup), the time from a connection's opening to its
// report, and the CPU the running agent takes; and, in the same run, gopsutil's connection
// listing (a full /proc walk per call) as the baseline. It writes JSON (see README.md).
//
// All connections are loopback ones from 127.0.0.1 (standing for the router-facing address)
// to listeners on 127.0.0.3 (standing for the internet), held by helper processes it starts
// (one process may not hold 100,000 sockets here), plus the ones it opens itself to measure
// the report latency.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	psnet "github.com/shirou/gopsutil/v4/net"

	"homework/endhost-agent/internal/agent"
	"homework/endhost-agent/internal/flow"
	"homework/endhost-agent/internal/source"
	"homework/endhost-agent/internal/tracker"
)

var (
	self   = netip.MustParseAddr("127.0.0.1")
	remote = netip.MustParseAddr("127.0.0.3")
	scope  = flow.Scope{Self: self, OnLink: netip.PrefixFrom(self, 32)}
)

// perHolder is how many connections one holder process opens: both ends count against its
// open-file limit (20,000 here, and raising it needs CAP_SYS_RESOURCE).
const perHolder = 8_000

type distribution struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P95    float64 `json:"p95"`
	Max    float64 `json:"max"`
}

func distOf(ms []float64) distribution {
	s := slices.Clone(ms)
	slices.Sort(s)
	at := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return distribution{N: len(s), Median: at(0.5), P95: at(0.95), Max: s[len(s)-1]}
}

type result struct {
	Connections     int          `json:"connections"`
	SocketsInTable  int          `json:"sockets_in_table"`
	FirstScanMS     float64      `json:"first_scan_ms"`
	ScanMS          distribution `json:"scan_ms"`
	ScanNewMS       distribution `json:"scan_with_one_new_connection_ms"`
	ReportLatencyMS distribution `json:"report_latency_ms"`
	AgentCPUPercent float64      `json:"agent_cpu_percent_of_one_core"`
	GopsutilMS      distribution `json:"gopsutil_connections_ms"`
	// GopsutilListedMin is the fewest sockets one gopsutil call returned: all states (with
	// TIME_WAIT) of every process on the machine, so other workloads show here.
	GopsutilListedMin int     `json:"gopsutil_sockets_listed_min"`
	RatioScan         float64 `json:"ratio_gopsutil_over_scan_median"`
	RatioScanWithNew  float64 `json:"ratio_gopsutil_over_scan_with_new_median"`
}

func main() {
	if count := os.Getenv("AGENT_BENCH_HOLD"); count != "" {
		var n int
		fmt.Sscan(count, &n)
		hold(n)
		return
	}
	out := flag.String("out", "", "also write the JSON here")
	sizes := flag.String("sizes", "1000,50000", "numbers of open connections to measure with")
	flag.Parse()
	var counts []int
	for _, f := range strings.Split(*sizes, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n <= 0 {
			fail(fmt.Errorf("--sizes: %q", f))
		}
		counts = append(counts, n)
	}
	report := map[string]any{
		"what":     "endhost-agent on Linux: netlink sock_diag + cached /proc lookup vs gopsutil's /proc walk, N open loopback TCP connections",
		"cores":    runtime.NumCPU(),
		"interval": agentInterval.String(),
		"max_duty": agent.MaxDuty,
		"max_wait": agent.MaxWait.String(),
		"date":     time.Now().UTC().Format(time.RFC3339),
	}
	var results []result
	for _, n := range counts {
		r, err := measure(n)
		if err != nil {
			fail(err)
		}
		results = append(results, r)
	}
	report["runs"] = results
	b, _ := json.MarshalIndent(report, "", "  ")
	b = append(b, '\n')
	os.Stdout.Write(b)
	if *out != "" {
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "agent-bench:", err)
	os.Exit(1)
}

const agentInterval = 250 * time.Millisecond

// load is n open connections held by helper processes (this program run with
// AGENT_BENCH_HOLD=count), plus a listener for the connections the bench opens itself.
type load struct {
	holders []holder
	ln      net.Listener
}

type holder struct {
	cmd   *exec.Cmd
	stdin io.Closer // closing it tells the holder to exit
}

func (l *load) close() {
	l.ln.Close()
	for _, h := range l.holders {
		h.stdin.Close()
		_ = h.cmd.Wait()
	}
}

func openLoad(n int) (*load, error) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(remote, 0).String())
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			x, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, x); x.Close() }()
		}
	}()
	l := &load{ln: ln}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	for left := n; left > 0; left -= perHolder {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), fmt.Sprintf("AGENT_BENCH_HOLD=%d", min(left, perHolder)))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		l.holders = append(l.holders, holder{cmd: cmd, stdin: stdin})
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			l.close()
			return nil, fmt.Errorf("connection holder failed: %q %v", line, err)
		}
	}
	return l, nil
}

// hold opens count connections to a listener of its own, says "ready" and keeps them open
// until stdin closes.
func hold(count int) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(remote, 0).String())
	if err != nil {
		fail(err)
	}
	accepted := make(chan []net.Conn)
	go func() {
		var ends []net.Conn // kept referenced: a collected conn would be closed
		for len(ends) < count {
			x, err := ln.Accept()
			if err != nil {
				fail(err)
			}
			ends = append(ends, x)
		}
		accepted <- ends
	}()
	open := make([]net.Conn, 0, count)
	for i := 0; i < count; i++ {
		x, err := dialTo(ln.Addr().String())
		if err != nil {
			fail(fmt.Errorf("connection %d of %d: %w", i+1, count, err))
		}
		open = append(open, x)
	}
	ends := <-accepted
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	runtime.KeepAlive(open)
	runtime.KeepAlive(ends)
}

// dialTo connects without binding first: the kernel picks 127.0.0.1 (self) as the source
// and, binding at connect time, may reuse a port towards another listener, so 50,000
// connections fit in the 28,000 ephemeral ports.
func dialTo(addr string) (net.Conn, error) {
	x, err := net.Dial("tcp", addr)
	if err == nil && x.LocalAddr().(*net.TCPAddr).AddrPort().Addr() != self {
		x.Close()
		return nil, fmt.Errorf("connection from %v, want from %v", x.LocalAddr(), self)
	}
	return x, err
}

// dial opens one more connection, from this process.
func (l *load) dial() (net.Conn, error) { return dialTo(l.ln.Addr().String()) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func measure(n int) (result, error) {
	fmt.Fprintf(os.Stderr, "agent-bench: opening %d connections\n", n)
	c, err := openLoad(n)
	if err != nil {
		return result{}, err
	}
	defer c.close()
	r := result{Connections: n}
	ctx := context.Background()
	src := source.NewNetlink("/proc")
	tr := tracker.New()
	scan := func() (int, []flow.Report) {
		socks, err := src.Sockets(ctx)
		if err != nil {
			fail(err)
		}
		var through []flow.Socket
		for _, s := range socks {
			if t, ok := scope.Through(s.Tuple); ok {
				s.Tuple = t
				through = append(through, s)
			}
		}
		return len(socks), tr.Observe(through, src.Programs)
	}
	timed := func(f func()) float64 { t := time.Now(); f(); return ms(time.Since(t)) }

	var first []flow.Report
	r.FirstScanMS = timed(func() { r.SocketsInTable, first = scan() })
	if len(first) < n {
		return r, fmt.Errorf("first scan named %d of %d connections", len(first), n)
	}
	trials := 20
	var steady, withNew []float64
	for i := 0; i < trials; i++ {
		steady = append(steady, timed(func() { scan() }))
		x, err := c.dial()
		if err != nil {
			return r, err
		}
		var reports []flow.Report
		withNew = append(withNew, timed(func() { _, reports = scan() }))
		x.Close()
		// The scan sees every process's sockets, as an agent does: a connection another program on
		// this machine opened meanwhile is reported too, and is not the bench's to count.
		ours := 0
		for _, rep := range reports {
			if rep.Tuple.Remote == x.RemoteAddr().(*net.TCPAddr).AddrPort() {
				ours++
			}
		}
		if ours != 1 {
			return r, fmt.Errorf("a scan after one new connection reported it %d times (%d reports in all)", ours, len(reports))
		}
	}
	r.ScanMS, r.ScanNewMS = distOf(steady), distOf(withNew)

	lat, cpu, err := runAgent(c, trials, time.Duration(r.ScanMS.Median*float64(time.Millisecond)))
	if err != nil {
		return r, err
	}
	r.ReportLatencyMS, r.AgentCPUPercent = distOf(lat), cpu

	fmt.Fprintf(os.Stderr, "agent-bench: gopsutil baseline with %d connections\n", n)
	var baseline []float64
	for i := 0; i < max(3, trials*1000/n); i++ {
		var got []psnet.ConnectionStat
		baseline = append(baseline, timed(func() {
			if got, err = psnet.ConnectionsWithContext(ctx, "inet"); err != nil {
				fail(err)
			}
		}))
		if i == 0 || len(got) < r.GopsutilListedMin {
			r.GopsutilListedMin = len(got)
		}
	}
	r.GopsutilMS = distOf(baseline)
	r.RatioScan = r.GopsutilMS.Median / r.ScanMS.Median
	r.RatioScanWithNew = r.GopsutilMS.Median / r.ScanNewMS.Median
	return r, nil
}

// latencySink timestamps the reports the running agent hands over.
type latencySink struct {
	mu   sync.Mutex
	seen map[flow.Tuple]time.Time
}

func (s *latencySink) Add(reports ...flow.Report) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reports {
		s.seen[r.Tuple] = now
	}
}

func (s *latencySink) Flush() error { return nil }

func (s *latencySink) Retarget(string, string) {} // the bench's "router" never moves

func (s *latencySink) at(t flow.Tuple) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.seen[t]
	return at, ok
}

// runAgent runs the agent's loop over the open connections: the report latency of trials
// new connections opened at random moments, then its CPU use over an idle stretch of at
// least four of its scan cycles (a cycle is a scan taking scan plus the wait after it).
func runAgent(c *load, trials int, scan time.Duration) ([]float64, float64, error) {
	ctx, cancel := context.WithCancel(context.Background())
	sink := &latencySink{seen: map[flow.Tuple]time.Time{}}
	a := agent.New(source.NewNetlink("/proc"), scope, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, agent.Options{Interval: agentInterval}, sink) }()
	defer func() { cancel(); <-done }()

	// Wait for the first scan, which names every existing connection at once.
	probe, err := c.dial()
	if err != nil {
		return nil, 0, err
	}
	if _, err := waitReport(sink, probe, time.Now()); err != nil {
		return nil, 0, err
	}
	probe.Close()

	var lat []float64
	for i := 0; i < trials; i++ {
		time.Sleep(time.Duration(rand.Int64N(int64(agentInterval)))) // a random phase of the scan cycle
		opened := time.Now()
		x, err := c.dial()
		if err != nil {
			return nil, 0, err
		}
		l, err := waitReport(sink, x, opened)
		x.Close()
		if err != nil {
			return nil, 0, err
		}
		lat = append(lat, l)
	}

	idle := max(5*time.Second, 4*min(agent.MaxWait, time.Duration(float64(scan)/agent.MaxDuty)))
	cpu0, wall0 := cpuTime(), time.Now()
	time.Sleep(idle)
	cpu := float64(cpuTime()-cpu0) / float64(time.Since(wall0)) * 100
	return lat, cpu, nil
}

func waitReport(sink *latencySink, x net.Conn, opened time.Time) (float64, error) {
	t := flow.Tuple{Proto: flow.TCP, Local: x.LocalAddr().(*net.TCPAddr).AddrPort(), Remote: x.RemoteAddr().(*net.TCPAddr).AddrPort()}
	deadline := opened.Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if at, ok := sink.at(t); ok {
			return ms(at.Sub(opened)), nil
		}
		time.Sleep(time.Millisecond)
	}
	return 0, fmt.Errorf("connection %v was never reported", t)
}
