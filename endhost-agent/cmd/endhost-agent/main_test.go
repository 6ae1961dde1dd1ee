package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"homework/endhost-agent/internal/discovery"
	"homework/endhost-agent/internal/hwdbtest"
	"homework/endhost-agent/internal/reporter"
)

// The test binary runs as the agent itself when HWAGENT_MAIN is set.
func TestMain(m *testing.M) {
	if os.Getenv("HWAGENT_MAIN") != "" {
		main()
	}
	os.Exit(m.Run())
}

// An off-link peer in TEST-NET-3: connecting a UDP socket to it only consults the routing
// table (no packet is sent), and the route goes through the default gateway.
var offLink = netip.MustParseAddrPort("203.0.113.9:443")

// sockets opens, in this process, a connection through the router, an unconnected UDP socket
// on the wildcard address, and a loopback connection (which must stay private).
func sockets(t *testing.T) (router discovery.Router, through, wildcard, loopback reporter.Record) {
	t.Helper()
	router, err := discovery.Find(netip.Addr{})
	if err != nil {
		t.Skipf("this host has no default gateway to stand for the router: %v", err)
	}
	host, _ := os.Hostname()
	app := filepath.Base(os.Args[0])
	udp, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(offLink))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	local := udp.LocalAddr().(*net.UDPAddr).AddrPort()
	through = reporter.Record{Proto: 17, Saddr: local.Addr().String(), Sport: local.Port(), Daddr: offLink.Addr().String(), Dport: offLink.Port(), App: app, Host: host}

	any, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { any.Close() })
	port := any.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	wildcard = reporter.Record{Proto: 17, Saddr: router.Scope.Self.String(), Sport: port, Daddr: reporter.AnyPeer, App: app, Host: host}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lo, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lo.Close() })
	lport := lo.LocalAddr().(*net.TCPAddr).AddrPort().Port()
	loopback = reporter.Record{Proto: 6, Saddr: "127.0.0.1", Sport: lport}
	return router, through, wildcard, loopback
}

// --once prints, as JSON lines, the connections through the router with this program's name,
// and nothing about loopback; it sends nothing and exits 0.
func TestOncePrintsWhatWouldBeReported(t *testing.T) {
	_, through, wildcard, loopback := sockets(t)
	var out, errs bytes.Buffer
	if code := run([]string{"--once"}, &out, &errs); code != 0 {
		t.Fatalf("exit status %d; stderr: %s", code, errs.String())
	}
	var printed []reporter.Record
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r reporter.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		printed = append(printed, r)
	}
	for _, want := range []reporter.Record{through, wildcard} {
		if !slices.Contains(printed, want) {
			t.Errorf("--once did not print %+v; printed %+v", want, printed)
		}
	}
	for _, r := range printed {
		if r.Sport == loopback.Sport && r.Proto == loopback.Proto || strings.HasPrefix(r.Saddr, "127.") {
			t.Errorf("--once printed a loopback connection: %+v", r)
		}
	}
}

// As a service: the agent finds the router by the default gateway, reports to hwdb (which
// sees it as a LAN host by its own address, as on the router), and stops cleanly on SIGTERM.
func TestServiceReportsToHWDBAndStopsOnSIGTERM(t *testing.T) {
	_, through, _, loopback := sockets(t)
	addr := hwdbtest.StartReady(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "router.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(hwdbtest.Key[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "--hwdb", addr, "--interval", "50ms", "--router-key-file", keyFile)
	cmd.Env = append(os.Environ(), "HWAGENT_MAIN=1")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	want := "[17 " + through.Saddr + " " + itoa(through.Sport) + " " + through.Daddr + " 443 " + through.App + " " + through.Host + "]"
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(hwdbtest.AppTuples(t, addr), want) {
		if time.Now().After(deadline) {
			t.Fatalf("row %s never arrived; AppTuples: %v; agent log:\n%s", want, hwdbtest.AppTuples(t, addr), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, row := range hwdbtest.AppTuples(t, addr) {
		if strings.Contains(row, " 127.0.0.1 "+itoa(loopback.Sport)+" ") {
			t.Errorf("a loopback connection reached the router: %s", row)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("agent exited with %v after SIGTERM; log:\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop on SIGTERM")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Fatalf("no clean stop in the log:\n%s", logs.String())
	}
}

// With a key the router cannot prove (a wrong --router-key, or another household's router), the
// running agent reports nothing and says plainly why and what to do.
func TestServiceWithAWrongKeyReportsNothingAndSaysWhy(t *testing.T) {
	sockets(t) // a connection through the default gateway that would be reported
	addr := hwdbtest.StartReady(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrong := hwdbtest.Key
	wrong[31] ^= 0x80
	cmd := exec.Command(self, "--hwdb", addr, "--interval", "50ms", "--router-key", hex.EncodeToString(wrong[:]))
	cmd.Env = append(os.Environ(), "HWAGENT_MAIN=1")
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), reporter.Unpaired) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent never said it is not paired; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "does not match this agent's key") || !strings.Contains(logs.String(), "--router-key from the router's web UI") {
		t.Fatalf("the reason is not plain; log:\n%s", logs.String())
	}
	time.Sleep(500 * time.Millisecond) // ten more scans
	if got := hwdbtest.AppTuples(t, addr); len(got) != 0 {
		t.Fatalf("reports reached a router that did not prove the key: %q", got)
	}
}

// syncBuffer is a bytes.Buffer the test reads while the child process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func itoa(n uint16) string { return strconv.Itoa(int(n)) }
