// Package hwdbtest runs a real hwdb server for tests, the way the router runs it for agents.
package hwdbtest

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"homework/hwdb/go/hwdbclient"

	"homework/endhost-agent/internal/pairing"
)

// LANPeer is the loopback address the server is told to treat as a LAN host: the tests'
// agents report from it, and rows about any other address must be refused.
const LANPeer = "127.0.0.2"

// Key is the household key the tests' routers hold (their --agent-key-file).
var Key = pairing.Key{0: 0x11, 7: 0x22, 31: 0x33}

// Binary is the hwdb server binary from HWDB_BIN; the test is skipped without it.
func Binary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HWDB_BIN")
	if bin == "" {
		t.Skip("HWDB_BIN is not set: skipping the tests against a live hwdb (build it with make -C ../hwdb build and set HWDB_BIN=../hwdb/target/release/hwdb)")
	}
	return bin
}

// FreeAddr is a loopback UDP address nothing listens on.
func FreeAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// Start runs a server at addr, holding Key, and stops it when the test ends; it does not wait
// for it.
func Start(t *testing.T, addr string) { StartHolding(t, addr, Key) }

// StartHolding is Start with another household's key.
func StartHolding(t *testing.T, addr string, key pairing.Key) {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "agent.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key[:])+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Binary(t), "serve", "--listen", addr, "--db", filepath.Join(dir, "hwdb.sqlite"),
		"--rto-ms", "20", "--treat-as-lan", LANPeer, "--agent-key-file", keyFile)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// StartReady runs a server and returns its address once it answers.
func StartReady(t *testing.T) string { return StartReadyHolding(t, Key) }

// StartReadyHolding is StartReady with another household's key.
func StartReadyHolding(t *testing.T, key pairing.Key) string {
	t.Helper()
	addr := FreeAddr(t)
	StartHolding(t, addr, key)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := Query(t, addr, "show tables"); err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatal("hwdb did not start")
		}
	}
}

// Query runs a statement as the router's own services do (from loopback).
func Query(t *testing.T, addr, stmt string) (*hwdbclient.Result, error) {
	t.Helper()
	c, err := hwdbclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Timeout = 300 * time.Millisecond
	return c.Query(stmt)
}

// AppTuples lists the table's rows as "[proto saddr sport daddr dport app host]".
func AppTuples(t *testing.T, addr string) []string {
	t.Helper()
	res, err := Query(t, addr, "select proto, saddr, sport, daddr, dport, app, host from AppTuples")
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]string, 0, len(res.Rows))
	for _, r := range res.Rows {
		rows = append(rows, fmt.Sprint(r))
	}
	return rows
}
