package hwdbclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

type vector struct {
	File       string `json:"file"`
	Kind       string `json:"kind"`
	Conn       uint32 `json:"conn"`
	Seq        uint32 `json:"seq"`
	Frag       uint16 `json:"frag"`
	Count      uint16 `json:"count"`
	Flags      uint16 `json:"flags"`
	PayloadLen int    `json:"payload_len"`
	Payload    string `json:"payload"`
}

type message struct {
	Name  string          `json:"name"`
	Files []string        `json:"files"`
	Text  *string         `json:"text"`
	Reply json.RawMessage `json:"reply"`
}

type manifest struct {
	Magic      int               `json:"magic"`
	Version    int               `json:"version"`
	HeaderLen  int               `json:"header_len"`
	MaxPayload int               `json:"max_payload"`
	Kinds      map[string]uint8  `json:"kinds"`
	Flags      map[string]uint16 `json:"flags"`
	Vectors    []vector          `json:"vectors"`
	Messages   []message         `json:"messages"`
}

const vectorDir = "../testvectors"

func loadManifest(t *testing.T) manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func readVector(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConstants(t *testing.T) {
	m := loadManifest(t)
	if m.Magic != Magic || m.Version != Version || m.HeaderLen != HeaderLen || m.MaxPayload != MaxPayload {
		t.Fatalf("constants differ from manifest: %+v", m)
	}
	for name, k := range m.Kinds {
		if KindNames[k] != name {
			t.Errorf("kind %d: %q vs %q", k, KindNames[k], name)
		}
	}
	if m.Flags["RETRANSMIT"] != FlagRetransmit || m.Flags["UNKNOWN"] != FlagUnknown {
		t.Errorf("flags differ: %v", m.Flags)
	}
}

func TestVectors(t *testing.T) {
	for _, v := range loadManifest(t).Vectors {
		data := readVector(t, v.File)
		h, p, err := Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", v.File, err)
		}
		want := Header{Conn: v.Conn, Seq: v.Seq, Frag: v.Frag, Count: v.Count, Flags: v.Flags, Kind: h.Kind}
		if KindNames[h.Kind] != v.Kind || h != want || string(p) != v.Payload || len(p) != v.PayloadLen {
			t.Errorf("%s: decoded %+v %q", v.File, h, p)
		}
		again, err := Encode(h, p)
		if err != nil || !bytes.Equal(again, data) {
			t.Errorf("%s: re-encoding differs", v.File)
		}
	}
}

func TestMessages(t *testing.T) {
	for _, m := range loadManifest(t).Messages {
		var whole []byte
		var parts [][]byte
		for _, f := range m.Files {
			_, p, err := Decode(readVector(t, f))
			if err != nil {
				t.Fatal(err)
			}
			whole = append(whole, p...)
			parts = append(parts, p)
		}
		if m.Text != nil {
			if string(whole) != *m.Text || !reflect.DeepEqual(Fragments(whole), parts) {
				t.Errorf("%s: reassembly differs", m.Name)
			}
			continue
		}
		var got, want interface{}
		_ = json.Unmarshal(whole, &got)
		_ = json.Unmarshal(m.Reply, &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: reply differs", m.Name)
		}
		r, err := ParseReply(whole)
		var se *ServerError
		if errors.As(err, &se) {
			if se.Msg != "1:10: expected 'from', found 'form'" {
				t.Errorf("%s: error %q", m.Name, se.Msg)
			}
		} else if err != nil || len(r.Columns) == 0 {
			t.Errorf("%s: %v", m.Name, err)
		}
	}
	r, _ := ParseReply(whole(t, "response_ok.bin"))
	if ts := r.Rows[0][0].(json.Number).String(); ts != "1700000000123456789" {
		t.Errorf("timestamp lost precision: %s", ts)
	}
	if r.Maps()[0]["app"] != "zoom" {
		t.Errorf("maps: %v", r.Maps())
	}
}

func whole(t *testing.T, f string) []byte {
	_, p, err := Decode(readVector(t, f))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecodeRejectsGarbage(t *testing.T) {
	good := readVector(t, "request_select.bin")
	bad := [][]byte{nil, good[:19], append([]byte{0}, good[1:]...), good[:len(good)-1]}
	for _, b := range bad {
		if _, _, err := Decode(b); err == nil {
			t.Errorf("accepted %x", b)
		}
	}
}

// ---------------------------------------------------------------- live server

func hwdbBinary(t *testing.T) string {
	if b := os.Getenv("HWDB_BIN"); b != "" {
		return b
	}
	for _, p := range []string{"../target/release/hwdb", "../target/debug/hwdb"} {
		if _, err := os.Stat(p); err == nil {
			abs, _ := filepath.Abs(p)
			return abs
		}
	}
	t.Skip("no hwdb binary: set HWDB_BIN or build hwdb")
	return ""
}

func freePort(t *testing.T) string {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

func startServer(t *testing.T, extra ...string) string {
	addr := freePort(t)
	args := append([]string{"serve", "--listen", addr, "--db", filepath.Join(t.TempDir(), "hwdb.sqlite"), "--rto-ms", "20"}, extra...)
	cmd := exec.Command(hwdbBinary(t), args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Timeout = 300 * time.Millisecond
		_, err = c.Query("show tables")
		c.Close()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatal("server did not start")
		}
	}
}

func TestLiveServer(t *testing.T) {
	addr := startServer(t, "--treat-as-lan", "127.0.0.2")
	c, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.RTO = 20 * time.Millisecond
	if _, err := c.Query("insert into Flows values (6,'10.2.0.10',5000,'1.1.1.1',443,10,1000)"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Query("select saddr, sum(bytes) from Flows [range 10 seconds] group by saddr")
	if err != nil || len(r.Rows) != 1 || r.Rows[0][0] != "10.2.0.10" || r.Rows[0][1].(json.Number).String() != "1000" {
		t.Fatalf("%v %+v", err, r)
	}
	if _, err := c.Query("select * form Flows"); err == nil || err.Error() != "1:10: expected 'from', found 'form'" {
		t.Fatalf("error = %v", err)
	}
	// A large, fragmented result.
	if _, err := c.Query("create table Big (n integer, s varchar)"); err != nil {
		t.Fatal(err)
	}
	for start := 0; start < 1000; start += 100 {
		var rows []string
		for i := start; i < start+100; i++ {
			rows = append(rows, "("+strconv.Itoa(i)+", '"+strings.Repeat("z", 1100)+"')")
		}
		if _, err := c.Query("insert into Big values " + strings.Join(rows, ",")); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := c.Request("select * from Big")
	if err != nil || len(raw) < 1<<20 {
		t.Fatalf("big result: %v, %d bytes", err, len(raw))
	}
	// The end-host agent's case: a LAN host reports its own flows and nothing else.
	lan, err := DialFrom(addr, "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lan.Close()
	lan.RTO = 20 * time.Millisecond
	if _, err := lan.Query("insert into AppTuples values (6,'127.0.0.2',5000,'1.1.1.1',443,'firefox','laptop')"); err != nil {
		t.Fatal(err)
	}
	_, err = lan.Query("insert into AppTuples values (6,'10.9.9.9',5000,'1.1.1.1',443,'firefox','laptop')")
	var se *ServerError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Msg, "forbidden: LAN clients may only insert into AppTuples rows for their own address") {
		t.Fatalf("forbidden insert: %v", err)
	}
	// A LAN batch over its size limit is refused at its first fragment, clearly and at
	// once; the same batch from loopback is inserted.
	batch := "insert into AppTuples values " +
		strings.TrimSuffix(strings.Repeat("(6,'127.0.0.2',5000,'1.1.1.1',443,'firefox','laptop'),", 1500), ",")
	started := time.Now()
	_, err = lan.Query(batch)
	if !errors.As(err, &se) || se.Msg != "query is longer than the limit of 65536 bytes for LAN clients" {
		t.Fatalf("oversized LAN batch: %v", err)
	}
	if took := time.Since(started); took > time.Second {
		t.Fatalf("the refusal took %v", took)
	}
	if r, err := c.Query(batch); err != nil || r.Message != "inserted 1500 rows" {
		t.Fatalf("the same batch from loopback: %v %+v", err, r)
	}
}

func TestTimeout(t *testing.T) {
	c, err := Dial(freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.RTO, c.Timeout = 50*time.Millisecond, 500*time.Millisecond
	if _, err := c.Query("show tables"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v", err)
	}
}
