// Package reporter sends the agent's reports to the router's hwdb as AppTuples rows over the
// hwdb RPC, in statements under the server's size limit for LAN clients, keeping what could
// not be sent for the next flush.
package reporter

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"homework/hwdb/go/hwdbclient"

	"homework/endhost-agent/internal/agenterr"
	"homework/endhost-agent/internal/flow"
)

const (
	// MaxStatementBytes keeps each insert well under hwdb's 64 KiB limit for LAN clients.
	MaxStatementBytes = 32 << 10
	// MaxQueued bounds what waits while the router is unreachable; the oldest go first.
	MaxQueued = 50_000
	// AnyPeer is the daddr of an unconnected UDP socket: it talks to any peer from its port.
	AnyPeer = "*"
)

// Reporter queues reports and sends them. Not safe for concurrent use.
type Reporter struct {
	server, local, host string
	// Timeout bounds one statement's exchange, so an unreachable router delays a scan by at
	// most this much.
	Timeout time.Duration
	log     *slog.Logger
	client  *hwdbclient.Client
	queue   []flow.Report
	dropped int
}

// New reports to the hwdb at server ("10.2.0.9:987"), from local ("" for any address), with
// host as the AppTuples host column (this computer's name).
func New(server, local, host string, log *slog.Logger) *Reporter {
	return &Reporter{server: server, local: local, host: host, Timeout: 5 * time.Second, log: log}
}

// Add queues reports for the next Flush.
func (r *Reporter) Add(reports ...flow.Report) {
	r.queue = append(r.queue, reports...)
	if over := len(r.queue) - MaxQueued; over > 0 {
		r.queue = r.queue[over:]
		r.dropped += over
		r.log.Warn("router unreachable for long: dropping the oldest reports", "dropped", over, "dropped_total", r.dropped)
	}
}

// Queued is the number of reports waiting.
func (r *Reporter) Queued() int { return len(r.queue) }

// Flush sends everything queued, one statement at a time. A transient failure keeps the rest
// queued; a refused statement is dropped (sending it again cannot succeed) and reported.
func (r *Reporter) Flush() error {
	for len(r.queue) > 0 {
		stmt, n := Statement(r.queue, r.host)
		err := r.send(stmt)
		if err != nil && agenterr.KindOf(err) == agenterr.Transient {
			return err
		}
		r.queue = r.queue[n:]
		if err != nil {
			return err
		}
		r.log.Debug("reported", "rows", n)
	}
	return nil
}

func (r *Reporter) send(stmt string) error {
	if r.client == nil {
		c, err := hwdbclient.DialFrom(r.server, r.local)
		if err != nil {
			return agenterr.New("connect to hwdb at "+r.server, agenterr.Transient, err)
		}
		c.Timeout = r.Timeout
		r.client = c
	}
	_, err := r.client.Query(stmt)
	if err == nil {
		return nil
	}
	var refusal *hwdbclient.ServerError
	if errors.As(err, &refusal) && !strings.HasPrefix(refusal.Msg, "busy:") {
		return agenterr.New("report to hwdb", agenterr.Refused, err)
	}
	// Unanswered or busy: start a fresh connection next time (the server may have restarted).
	r.client.Close()
	r.client = nil
	return agenterr.New("report to hwdb at "+r.server, agenterr.Transient, err)
}

// Retarget sends to the hwdb at server from local from now on. Reports still queued for
// another router are about an address that one would refuse: they are dropped.
func (r *Reporter) Retarget(server, local string) {
	if server == r.server && local == r.local {
		return
	}
	if len(r.queue) > 0 {
		r.log.Info("dropping reports meant for the previous router", "count", len(r.queue))
	}
	r.Close()
	r.server, r.local, r.queue = server, local, nil
}

// Close releases the connection.
func (r *Reporter) Close() {
	if r.client != nil {
		r.client.Close()
		r.client = nil
	}
}

// Statement builds one insert of as many of reports as fit in MaxStatementBytes (at least
// one) and says how many it holds.
func Statement(reports []flow.Report, host string) (string, int) {
	var b strings.Builder
	b.WriteString("insert into AppTuples values ")
	n := 0
	for _, rep := range reports {
		row := Row(rep, host)
		if n > 0 && b.Len()+len(row)+1 > MaxStatementBytes {
			break
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
		n++
	}
	return b.String(), n
}

// Record is one AppTuples row, as sent and as printed by endhost-agent --once.
type Record struct {
	Proto uint8  `json:"proto"`
	Saddr string `json:"saddr"`
	Sport uint16 `json:"sport"`
	Daddr string `json:"daddr"`
	Dport uint16 `json:"dport"`
	App   string `json:"app"`
	Host  string `json:"host"`
}

// RecordOf is the row reporting rep from host.
func RecordOf(rep flow.Report, host string) Record {
	t := rep.Tuple
	r := Record{Proto: uint8(t.Proto), Saddr: t.Local.Addr().String(), Sport: t.Local.Port(), Daddr: AnyPeer, App: rep.Program, Host: host}
	if !t.Unconnected() {
		r.Daddr, r.Dport = t.Remote.Addr().String(), t.Remote.Port()
	}
	return r
}

// Row is the statement text of rep's row: (proto, saddr, sport, daddr, dport, app, host).
func Row(rep flow.Report, host string) string {
	r := RecordOf(rep, host)
	return fmt.Sprintf("(%d,%s,%d,%s,%d,%s,%s)", r.Proto, quote(r.Saddr), r.Sport, quote(r.Daddr), r.Dport, quote(r.App), quote(r.Host))
}

// quote makes a string literal of hwdb's language, where a doubled quote is a quote.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
