package source

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"homework/endhost-agent/internal/flow"
	"homework/endhost-agent/internal/tracker"
)

// The test binary doubles as the programs whose sockets the agent must name: copied under a
// known name and run with HWAGENT_HELPER set, it opens sockets and reports their ports.
func TestMain(m *testing.M) {
	switch os.Getenv("HWAGENT_HELPER") {
	case "":
		os.Exit(m.Run())
	case "hold":
		helperHold(os.Getenv("HWAGENT_CONNECT"))
	default:
		fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv("HWAGENT_HELPER"))
		os.Exit(2)
	}
}

// helperHold connects over TCP and binds an unconnected UDP socket, prints both local
// addresses, and exits as soon as stdin says so (or closes), leaving the TCP connection to
// the kernel: the test's end stays open, so it lingers in FIN_WAIT2 with no owner.
func helperHold(server string) {
	c, err := net.Dial("tcp", server)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s %s\n", c.LocalAddr(), u.LocalAddr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// startHelper runs a copy of the test binary named program and returns the TCP and UDP local
// addresses it printed, and a function that makes it exit and waits for it.
func startHelper(t *testing.T, program, server string) (tcp, udp netip.AddrPort, exit func()) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), program)
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "HWAGENT_HELPER=hold", "HWAGENT_CONNECT="+server)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	exit = func() {
		if !exited {
			exited = true
			stdin.Close()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(exit)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("%s printed no addresses: %v", program, err)
	}
	fields := strings.Fields(line)
	return netip.MustParseAddrPort(fields[0]), netip.MustParseAddrPort(fields[1]), exit
}

// agent is the source and the tracker as the agent runs them, collecting every report.
type agent struct {
	src     *Netlink
	tr      *tracker.Tracker
	reports map[flow.Tuple][]string
	last    []flow.Socket
}

func newAgent() *agent {
	return &agent{src: NewNetlink("/proc"), tr: tracker.New(), reports: map[flow.Tuple][]string{}}
}

func (a *agent) scan(t *testing.T) {
	t.Helper()
	socks, err := a.src.Sockets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a.last = socks
	for _, r := range a.tr.Observe(socks, a.src.Programs) {
		a.reports[r.Tuple.Key()] = append(a.reports[r.Tuple.Key()], r.Program)
	}
}

// scanUntil scans until cond holds, failing after a deadline.
func (a *agent) scanUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.scan(t)
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; reports: %v", what, a.reports)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *agent) owner(tuple flow.Tuple) (owner uint64, present bool) {
	for _, s := range a.last {
		if s.Tuple.Key() == tuple.Key() {
			return s.Owner, true
		}
	}
	return 0, false
}

func listen(t *testing.T) (net.Listener, chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			accepted <- c
		}
	}()
	return ln, accepted
}

// A TCP connection and an unconnected UDP socket opened by a program with a known name are
// reported once each with that name; the test's own end of the connection is not confused
// with the program's.
func TestNetlinkNamesAProgramsTCPAndUDPSockets(t *testing.T) {
	ln, _ := listen(t)
	a := newAgent()
	tcpLocal, udpLocal, _ := startHelper(t, "hw-sockholder", ln.Addr().String())
	tcp := flow.Tuple{Proto: flow.TCP, Local: tcpLocal, Remote: netip.MustParseAddrPort(ln.Addr().String())}
	udp := flow.Tuple{Proto: flow.UDP, Local: udpLocal}
	ours := flow.Tuple{Proto: flow.TCP, Local: tcp.Remote, Remote: tcp.Local}

	a.scanUntil(t, "both sockets named", func() bool {
		return len(a.reports[tcp.Key()]) > 0 && len(a.reports[udp.Key()]) > 0 && len(a.reports[ours.Key()]) > 0
	})
	a.scan(t) // and once more: no second report
	for _, tuple := range []flow.Tuple{tcp, udp} {
		if got := a.reports[tuple.Key()]; len(got) != 1 || got[0] != "hw-sockholder" {
			t.Errorf("%v reported as %v, want once as hw-sockholder", tuple, got)
		}
	}
	self := programName(os.Args[0])
	if got := a.reports[ours.Key()]; len(got) != 1 || got[0] != self {
		t.Errorf("the accepting end %v reported as %v, want once as %s", ours, got, self)
	}
}

// A socket passed to another program (here /bin/sleep, which never opens a socket itself)
// belongs to the program holding it now.
func TestNetlinkNamesTheProgramASocketWasPassedTo(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program")
	}
	ln, _ := listen(t)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	cmd := exec.Command(sleep, "60")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	f.Close() // now only sleep holds the socket

	tuple := flow.Tuple{Proto: flow.TCP, Local: netip.MustParseAddrPort(c.LocalAddr().String()), Remote: netip.MustParseAddrPort(c.RemoteAddr().String())}
	a := newAgent()
	a.scanUntil(t, "the passed socket", func() bool { return len(a.reports[tuple.Key()]) > 0 })
	if got := a.reports[tuple.Key()]; got[0] != filepath.Base(sleep) {
		t.Fatalf("passed socket reported as %v, want %s", got, filepath.Base(sleep))
	}
}

// A program that exits right after connecting: its connection outlives it in the kernel's
// table (no owner any more) and keeps the name the agent learnt while it ran, without being
// reported a second time; its UDP socket, which dies with it, is dropped from the table.
func TestNetlinkConnectionOutlivesItsProgram(t *testing.T) {
	ln, accepted := listen(t)
	a := newAgent()
	tcpLocal, udpLocal, exit := startHelper(t, "hw-shortlived", ln.Addr().String())
	<-accepted // the server keeps its end open, so the client's end lingers after exit
	tcp := flow.Tuple{Proto: flow.TCP, Local: tcpLocal, Remote: netip.MustParseAddrPort(ln.Addr().String())}
	udp := flow.Tuple{Proto: flow.UDP, Local: udpLocal}
	a.scanUntil(t, "the short-lived program's connection", func() bool { return len(a.reports[tcp.Key()]) > 0 })

	exit()
	a.scanUntil(t, "the connection orphaned by the exit", func() bool {
		owner, present := a.owner(tcp)
		return present && owner == 0
	})
	if _, present := a.owner(udp); present {
		t.Errorf("the exited program's UDP socket %v is still in the table", udp)
	}
	if got := a.reports[tcp.Key()]; len(got) != 1 || got[0] != "hw-shortlived" {
		t.Fatalf("connection of the exited program reported %v, want once as hw-shortlived", got)
	}
	if a.tr.Live() == 0 {
		t.Fatal("the tracker forgot the lingering connection")
	}
}
