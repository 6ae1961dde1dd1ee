// Package hwdbclient speaks the hwdb UDP RPC (see hwdb/PROTOCOL.md). Standard library only.
//
//	c, err := hwdbclient.Dial("127.0.0.1:987")
//	res, err := c.Query("insert into AppTuples values (6,'10.2.0.10',5000,'1.1.1.1',443,'firefox','laptop')")
package hwdbclient

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"syscall"
	"time"
)

// Wire constants (network byte order throughout).
const (
	Magic      = 0x4857
	Version    = 1
	HeaderLen  = 20
	MaxPayload = 1352

	FlagRetransmit = 0x0001
	FlagUnknown    = 0x0002
)

// Message kinds.
const (
	Request     uint8 = 1
	RequestAck  uint8 = 2
	Response    uint8 = 3
	ResponseAck uint8 = 4
	Notify      uint8 = 5
	NotifyAck   uint8 = 6
	Ping        uint8 = 7
	Pong        uint8 = 8
)

// KindNames maps kinds to the names PROTOCOL.md and the test vectors use.
var KindNames = map[uint8]string{
	Request: "REQUEST", RequestAck: "REQUEST_ACK", Response: "RESPONSE", ResponseAck: "RESPONSE_ACK",
	Notify: "NOTIFY", NotifyAck: "NOTIFY_ACK", Ping: "PING", Pong: "PONG",
}

// Header is the fixed 20-byte datagram header.
type Header struct {
	Kind  uint8
	Conn  uint32
	Seq   uint32
	Frag  uint16
	Count uint16
	Flags uint16
}

// Encode builds one datagram.
func Encode(h Header, payload []byte) ([]byte, error) {
	if len(payload) > MaxPayload {
		return nil, errors.New("hwdb: payload too large for one datagram")
	}
	b := make([]byte, HeaderLen, HeaderLen+len(payload))
	binary.BigEndian.PutUint16(b[0:], Magic)
	b[2] = Version
	b[3] = h.Kind
	binary.BigEndian.PutUint32(b[4:], h.Conn)
	binary.BigEndian.PutUint32(b[8:], h.Seq)
	binary.BigEndian.PutUint16(b[12:], h.Frag)
	binary.BigEndian.PutUint16(b[14:], h.Count)
	binary.BigEndian.PutUint16(b[16:], h.Flags)
	binary.BigEndian.PutUint16(b[18:], uint16(len(payload)))
	return append(b, payload...), nil
}

// Decode parses one datagram, rejecting anything malformed.
func Decode(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < HeaderLen {
		return h, nil, errors.New("short datagram")
	}
	if binary.BigEndian.Uint16(b[0:]) != Magic || b[2] != Version {
		return h, nil, errors.New("not an hwdb datagram")
	}
	h = Header{
		Kind:  b[3],
		Conn:  binary.BigEndian.Uint32(b[4:]),
		Seq:   binary.BigEndian.Uint32(b[8:]),
		Frag:  binary.BigEndian.Uint16(b[12:]),
		Count: binary.BigEndian.Uint16(b[14:]),
		Flags: binary.BigEndian.Uint16(b[16:]),
	}
	n := int(binary.BigEndian.Uint16(b[18:]))
	payload := b[HeaderLen:]
	switch {
	case KindNames[h.Kind] == "":
		return h, nil, errors.New("unknown kind")
	case n != len(payload) || n > MaxPayload:
		return h, nil, errors.New("length mismatch")
	case h.Count == 0 || h.Frag >= h.Count:
		return h, nil, errors.New("bad fragment numbering")
	case h.Flags&^(FlagRetransmit|FlagUnknown) != 0:
		return h, nil, errors.New("unknown flags")
	case n > 0 && h.Kind != Request && h.Kind != Response && h.Kind != Notify:
		return h, nil, errors.New("unexpected payload")
	}
	return h, payload, nil
}

// Fragments splits a message into datagram payloads; an empty message is one empty fragment.
func Fragments(msg []byte) [][]byte {
	if len(msg) == 0 {
		return [][]byte{{}}
	}
	var out [][]byte
	for i := 0; i < len(msg); i += MaxPayload {
		end := i + MaxPayload
		if end > len(msg) {
			end = len(msg)
		}
		out = append(out, msg[i:end])
	}
	return out
}

// Column describes one result column.
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Result is a decoded reply. Numbers are json.Number so 64-bit nanosecond timestamps stay exact.
type Result struct {
	Status       string          `json:"status"`
	Message      string          `json:"message,omitempty"`
	Subscription uint32          `json:"subscription,omitempty"`
	Columns      []Column        `json:"columns"`
	Rows         [][]interface{} `json:"rows"`
}

// Maps returns the rows as column-name-keyed maps.
func (r *Result) Maps() []map[string]interface{} {
	out := make([]map[string]interface{}, len(r.Rows))
	for i, row := range r.Rows {
		m := make(map[string]interface{}, len(row))
		for j, v := range row {
			if j < len(r.Columns) {
				m[r.Columns[j].Name] = v
			}
		}
		out[i] = m
	}
	return out
}

// ServerError carries the server's message for a refused or failed statement.
type ServerError struct{ Msg string }

func (e *ServerError) Error() string { return e.Msg }

// ErrTimeout is returned (wrapped) when the server does not answer.
var ErrTimeout = errors.New("hwdb: no answer from the server")

// ParseReply decodes a reply payload; a status other than "ok" becomes a *ServerError.
func ParseReply(payload []byte) (*Result, error) {
	var r Result
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	if err := d.Decode(&r); err != nil {
		return nil, fmt.Errorf("hwdb: malformed reply: %w", err)
	}
	if r.Status != "ok" {
		return &r, &ServerError{Msg: r.Message}
	}
	return &r, nil
}

// Client is one connection; not safe for concurrent use.
type Client struct {
	conn         *net.UDPConn
	id, seq      uint32
	RTO, MaxRTO  time.Duration
	MaxTries     int
	Timeout      time.Duration
	PingInterval time.Duration
	buf          []byte
}

// Dial connects to a server address such as "127.0.0.1:987".
func Dial(server string) (*Client, error) { return DialFrom(server, "") }

// DialFrom binds a local address first ("" for any).
func DialFrom(server, local string) (*Client, error) {
	raddr, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		return nil, err
	}
	var laddr *net.UDPAddr
	if local != "" {
		if laddr, err = net.ResolveUDPAddr("udp", local); err != nil {
			return nil, err
		}
	}
	c, err := net.DialUDP("udp", laddr, raddr)
	if err != nil {
		return nil, err
	}
	rnd := rand.New(rand.NewSource(time.Now().UnixNano() ^ int64(os.Getpid())<<32))
	return &Client{
		conn: c, id: rnd.Uint32(), seq: rnd.Uint32() >> 1,
		RTO: 100 * time.Millisecond, MaxRTO: 2 * time.Second, MaxTries: 8,
		Timeout: 30 * time.Second, PingInterval: 500 * time.Millisecond,
		buf: make([]byte, 65536),
	}, nil
}

// Close releases the socket.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) send(kind uint8, frag, count, flags uint16, payload []byte) error {
	b, err := Encode(Header{kind, c.id, c.seq, frag, count, flags}, payload)
	if err != nil {
		return err
	}
	_, err = c.conn.Write(b)
	if isRefused(err) {
		return nil // ICMP from an earlier datagram: same as a loss
	}
	return err
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// recv returns the next datagram of the current exchange, or ok=false at the deadline.
func (c *Client) recv(until time.Time) (Header, []byte, bool, error) {
	for {
		if !time.Now().Before(until) {
			return Header{}, nil, false, nil
		}
		_ = c.conn.SetReadDeadline(until)
		n, err := c.conn.Read(c.buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return Header{}, nil, false, nil
			}
			if isRefused(err) {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return Header{}, nil, false, err
		}
		h, p, err := Decode(c.buf[:n])
		if err == nil && h.Conn == c.id && h.Seq == c.seq {
			return h, append([]byte(nil), p...), true, nil
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Request sends one statement and returns the raw reply payload (JSON).
func (c *Client) Request(text string) ([]byte, error) {
	parts := Fragments([]byte(text))
	if len(parts) > 0xFFFF {
		return nil, errors.New("hwdb: request too large")
	}
	count := uint16(len(parts))
	c.seq++
	end := time.Now().Add(c.Timeout)
	var first *Header
	var firstPayload []byte
	working := false

	for i := uint16(0); i < count && first == nil && !working; i++ {
		rto, flags, tries := c.RTO, uint16(0), 0
	retry:
		for {
			if err := c.send(Request, i, count, flags, parts[i]); err != nil {
				return nil, err
			}
			until := minTime(time.Now().Add(rto), end)
			for {
				h, p, ok, err := c.recv(until)
				if err != nil {
					return nil, err
				}
				if !ok {
					break
				}
				if h.Kind == Response {
					first, firstPayload = &h, p
					break retry
				}
				if h.Kind == RequestAck && h.Frag == i {
					working = i+1 == count
					break retry
				}
			}
			tries++
			if tries >= c.MaxTries || !time.Now().Before(end) {
				return nil, fmt.Errorf("%w (request not acknowledged)", ErrTimeout)
			}
			rto *= 2
			if rto > c.MaxRTO {
				rto = c.MaxRTO
			}
			flags = FlagRetransmit
		}
	}

	// The server holds the whole request and is executing it: keep it alive with pings.
	missed := 0
	for first == nil {
		h, p, ok, err := c.recv(minTime(time.Now().Add(c.PingInterval), end))
		if err != nil {
			return nil, err
		}
		switch {
		case !ok:
			if !time.Now().Before(end) || missed >= c.MaxTries {
				return nil, fmt.Errorf("%w (no reply to pings)", ErrTimeout)
			}
			missed++
			if err := c.send(Ping, 0, 1, 0, nil); err != nil {
				return nil, err
			}
		case h.Kind == Response:
			first, firstPayload = &h, p
		case h.Kind == Pong && h.Flags&FlagUnknown != 0:
			return nil, errors.New("hwdb: the server lost the request (did it restart?)")
		case h.Kind == Pong:
			missed = 0
		}
	}

	rcount := first.Count
	var out []byte
	next := uint16(0)
	h, p, have := *first, firstPayload, true
	for {
		if have && h.Kind == Response && h.Count == rcount {
			if h.Frag == next {
				out = append(out, p...)
				if err := c.send(ResponseAck, h.Frag, rcount, 0, nil); err != nil {
					return nil, err
				}
				next++
				if next == rcount {
					return out, nil
				}
			} else if h.Frag < next {
				if err := c.send(ResponseAck, h.Frag, rcount, 0, nil); err != nil {
					return nil, err
				}
			}
		}
		var err error
		h, p, have, err = c.recv(end)
		if err != nil {
			return nil, err
		}
		if !have {
			return nil, fmt.Errorf("%w (response incomplete)", ErrTimeout)
		}
	}
}

// Query runs a statement; a refused or failed statement returns a *ServerError.
func (c *Client) Query(text string) (*Result, error) {
	raw, err := c.Request(text)
	if err != nil {
		return nil, err
	}
	return ParseReply(raw)
}
