// Package reporter sends the agent's reports to the router's hwdb as AppTuples rows over the
// hwdb RPC, in statements under the server's size limit for LAN clients, keeping what could
// not be sent for the next flush. It reports only to a router that has proved it holds the
// household's key (package pairing), and slows down when the router asks it to.
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
	"homework/endhost-agent/internal/pairing"
)

const (
	// MaxStatementBytes keeps each insert well under hwdb's 64 KiB limit for LAN clients.
	MaxStatementBytes = 32 << 10
	// MaxQueued bounds what waits while the router is unreachable; the oldest go first.
	MaxQueued = 50_000
	// AnyPeer is the daddr of an unconnected UDP socket: it talks to any peer from its port.
	AnyPeer = "*"
	// FirstBackoff and MaxBackoff bound the pause after the router answers "busy:" (its row
	// rate for this computer is spent): the pause doubles while it stays busy.
	FirstBackoff = time.Second
	MaxBackoff   = 30 * time.Second
	// Unpaired begins every reason the agent gives for reporting nothing to a router.
	Unpaired = "not paired with this router: "
	// PairingHint ends it: what the person should do.
	PairingHint = "; run with --router-key from the router's web UI"
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
	// key is the household's key; nil: no router is ever trusted.
	key *pairing.Key
	// paired: server has proved it holds key. unpaired: why server will not be reported to
	// (said once; cleared when the agent reports to another router).
	paired   bool
	unpaired error
	// After a "busy:" answer nothing is sent before resume; backoff is the next pause.
	resume  time.Time
	backoff time.Duration
}

// New reports to the hwdb at server ("10.2.0.9:987"), from local ("" for any address), with
// host as the AppTuples host column (this computer's name), once the router has proved it
// holds key (nil: never).
func New(server, local, host string, key *pairing.Key, log *slog.Logger) *Reporter {
	return &Reporter{server: server, local: local, host: host, key: key, Timeout: 5 * time.Second, log: log, backoff: FirstBackoff}
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

// Flush sends everything queued, one statement at a time, once the router has proved it is
// this household's. A transient failure keeps the rest queued (after "busy:", nothing is sent
// until a pause has passed); a refused statement is dropped (sending it again cannot succeed)
// and reported. To a router that is not paired nothing is sent: the first Flush says why, the
// later ones drop what is queued and return nil.
func (r *Reporter) Flush() error {
	if len(r.queue) == 0 || time.Now().Before(r.resume) {
		return nil
	}
	if !r.paired {
		if err := r.pair(); err != nil {
			return err
		}
	}
	for len(r.queue) > 0 {
		stmt, n := Statement(r.queue, r.host)
		_, err := r.query("report to hwdb", stmt)
		if err != nil && agenterr.KindOf(err) == agenterr.Transient {
			return err
		}
		r.queue = r.queue[n:]
		if err != nil {
			return err
		}
		r.backoff = FirstBackoff
		r.log.Debug("reported", "rows", n)
	}
	return nil
}

// pair asks the router for its proof of a fresh nonce, unless it is already known not to be
// this household's.
func (r *Reporter) pair() error {
	if r.unpaired != nil {
		r.queue = nil
		return nil
	}
	if r.key == nil {
		return r.refuse(errors.New("no router key was given"))
	}
	nonce, err := pairing.NewNonce()
	if err != nil {
		return agenterr.New("make a nonce", agenterr.Transient, err)
	}
	res, err := r.query("ask the router for its proof", pairing.Statement(nonce, r.server))
	var refusal *hwdbclient.ServerError
	switch {
	case agenterr.KindOf(err) == agenterr.Refused && errors.As(err, &refusal):
		return r.refuse(fmt.Errorf("the router at %s answered: %s", r.server, refusal.Msg))
	case err != nil:
		return err
	case len(res.Rows) != 1 || len(res.Rows[0]) != 1:
		return r.refuse(fmt.Errorf("the router at %s gave no proof", r.server))
	}
	answer, _ := res.Rows[0][0].(string)
	if err := pairing.Check(*r.key, nonce, r.server, answer); err != nil {
		return r.refuse(fmt.Errorf("the router at %s: %w", r.server, err))
	}
	r.paired = true
	r.log.Info("the router proved it is this household's", "hwdb", r.server)
	return nil
}

// refuse gives up on the current router: nothing queued or later is reported to it.
func (r *Reporter) refuse(why error) error {
	r.unpaired = errors.New(Unpaired + why.Error() + PairingHint)
	r.queue = nil
	return agenterr.New("report to hwdb at "+r.server, agenterr.Refused, r.unpaired)
}

// query runs one statement; "busy:" answers start a pause (see Flush).
func (r *Reporter) query(op, stmt string) (*hwdbclient.Result, error) {
	if r.client == nil {
		c, err := hwdbclient.DialFrom(r.server, r.local)
		if err != nil {
			return nil, agenterr.New("connect to hwdb at "+r.server, agenterr.Transient, err)
		}
		c.Timeout = r.Timeout
		r.client = c
	}
	res, err := r.client.Query(stmt)
	if err == nil {
		return res, nil
	}
	var refusal *hwdbclient.ServerError
	if errors.As(err, &refusal) && !strings.HasPrefix(refusal.Msg, "busy:") {
		return nil, agenterr.New(op, agenterr.Refused, err)
	}
	if refusal != nil {
		r.resume = time.Now().Add(r.backoff)
		r.log.Info("the router asks to slow down; holding reports", "queued", len(r.queue), "pause", r.backoff, "answer", refusal.Msg)
		r.backoff = min(2*r.backoff, MaxBackoff)
	}
	// Unanswered or busy: start a fresh connection next time (the server may have restarted).
	r.client.Close()
	r.client = nil
	return nil, agenterr.New(op+" at "+r.server, agenterr.Transient, err)
}

// Retarget sends to the hwdb at server from local from now on. Reports still queued for
// another router are about an address that one would refuse: they are dropped. Another
// router must prove again that it is this household's.
func (r *Reporter) Retarget(server, local string) {
	if server == r.server && local == r.local {
		return
	}
	if len(r.queue) > 0 {
		r.log.Info("dropping reports meant for the previous router", "count", len(r.queue))
	}
	r.Close()
	if server != r.server {
		r.paired, r.unpaired = false, nil
	}
	r.server, r.local, r.queue = server, local, nil
	r.resume, r.backoff = time.Time{}, FirstBackoff
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
