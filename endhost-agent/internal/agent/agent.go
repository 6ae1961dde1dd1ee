// Package agent is the daemon's loop: scan the connection table, keep the connections that
// cross the router, turn them into deltas and hand those to the reporter.
package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"homework/endhost-agent/internal/agenterr"
	"homework/endhost-agent/internal/flow"
	"homework/endhost-agent/internal/source"
	"homework/endhost-agent/internal/tracker"
)

// Between scans the agent waits Interval, or longer after a costly scan so that scanning
// takes at most MaxDuty of a core, but never longer than MaxWait: a connection waits at most
// that long (plus a scan) to be reported. A table of 20,000 sockets that takes 100 ms to read
// is read every 2 s; one of 100,000 sockets (300 ms) every 2 s too, at 13% of a core.
const (
	MaxDuty = 0.05
	MaxWait = 2 * time.Second
)

// Sink takes reports and delivers them (reporter.Reporter).
type Sink interface {
	Add(reports ...flow.Report)
	Flush() error
	// Retarget sends from now on to the hwdb at server, from the local address.
	Retarget(server, local string)
}

// Locate finds the router now: this host's scope and the hwdb address to report to.
type Locate func() (flow.Scope, string, error)

// Options of Run.
type Options struct {
	// Interval between scans (see MaxDuty).
	Interval time.Duration
	// Locate is called every LocateEvery: a laptop moves between networks and a lease may
	// change, and reports must follow the router the connections go through.
	Locate      Locate
	LocateEvery time.Duration
}

// Agent watches one source on behalf of one scope.
type Agent struct {
	src   source.Source
	scope flow.Scope
	tr    *tracker.Tracker
	log   *slog.Logger
}

// New returns an agent reporting connections of src that cross the router.
func New(src source.Source, scope flow.Scope, log *slog.Logger) *Agent {
	return &Agent{src: src, scope: scope, tr: tracker.New(), log: log}
}

// Scan reads the table once and returns the connections to report since the last scan.
func (a *Agent) Scan(ctx context.Context) ([]flow.Report, error) {
	socks, err := a.src.Sockets(ctx)
	if err != nil {
		return nil, err
	}
	// Only connections through the router reach the tracker: nothing else is ever named
	// (no /proc walk for it) or reported.
	through := socks[:0]
	for _, s := range socks {
		if t, ok := a.scope.Through(s.Tuple); ok {
			s.Tuple = t
			through = append(through, s)
		}
	}
	return a.tr.Observe(through, a.src.Programs), nil
}

// Run scans and reports until ctx is done; then it makes a last attempt to deliver what is
// queued. It returns only a fatal error.
func (a *Agent) Run(ctx context.Context, opt Options, sink Sink) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	nextLocate := time.Now().Add(opt.LocateEvery)
	for {
		select {
		case <-ctx.Done():
			if err := sink.Flush(); err != nil {
				a.log.Warn("reports left undelivered at shutdown", "err", err)
			}
			return nil
		case <-timer.C:
		}
		if opt.Locate != nil && !time.Now().Before(nextLocate) {
			nextLocate = time.Now().Add(opt.LocateEvery)
			a.relocate(opt.Locate, sink)
		}
		start := time.Now()
		reports, err := a.Scan(ctx)
		took := time.Since(start)
		switch {
		case err == nil:
			sink.Add(reports...)
			if len(reports) > 0 {
				a.log.Debug("new connections", "count", len(reports), "live", a.tr.Live(), "scan", took)
			}
		case ctx.Err() != nil:
			continue
		case agenterr.KindOf(err) == agenterr.Fatal:
			return err
		default:
			a.log.Warn("scan failed; trying again", "err", err)
		}
		if err := sink.Flush(); err != nil {
			level := slog.LevelWarn
			if agenterr.KindOf(err) == agenterr.Refused {
				level = slog.LevelError // a bug or a wrong address: it will not fix itself
			}
			a.log.Log(ctx, level, "report not delivered", "err", err, "kind", agenterr.KindOf(err))
		}
		timer.Reset(min(MaxWait, max(opt.Interval, time.Duration(float64(took)/MaxDuty))))
	}
}

// relocate follows a change of router or of this host's address: connections are tracked
// afresh for the new scope and reported to the new router.
func (a *Agent) relocate(locate Locate, sink Sink) {
	scope, server, err := locate()
	if err != nil {
		a.log.Warn("cannot find the router; keeping the last one", "err", err)
		return
	}
	if scope != a.scope {
		a.log.Info("the router or this host's address changed", "self", scope.Self, "on_link", scope.OnLink, "hwdb", server)
		a.scope, a.tr = scope, tracker.New()
	}
	sink.Retarget(server, netip.AddrPortFrom(scope.Self, 0).String())
}
