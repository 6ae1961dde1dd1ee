// Package tracker turns successive scans of the socket table into deltas: each connection is
// reported once, when it first appears with a known program. It is pure logic: the caller
// supplies each scan and a function that names owners, and gets back what to report.
package tracker

import (
	"homework/endhost-agent/internal/flow"
)

// Namer names the given owners (socket inodes or process ids); owners it cannot find (their
// process has already exited) are absent from the answer.
type Namer func(owners []uint64) map[uint64]string

type conn struct {
	owner   uint64 // the last nonzero owner seen for this key
	program string // "" until named
	missing bool   // absent from the last scan
}

// Tracker remembers the connections of the last scan and the names of their owners.
type Tracker struct {
	live map[flow.Tuple]conn
	// names caches owner -> program for owners alive in the last scan, so an owner is named
	// once (one /proc walk) and keeps its name after its process exits.
	names map[uint64]string
	// unnamed holds owners the namer could not name: asking again would repeat a full walk
	// every scan for a socket whose process is gone.
	unnamed map[uint64]bool
}

// New returns an empty tracker.
func New() *Tracker {
	return &Tracker{live: map[flow.Tuple]conn{}, names: map[uint64]string{}, unnamed: map[uint64]bool{}}
}

// Observe takes one full scan and returns the connections to report: new ones (including a
// tuple closed and reopened), and known ones that were unnamed until now.
func (t *Tracker) Observe(scan []flow.Socket, name Namer) []flow.Report {
	var unknown []uint64
	for _, s := range scan {
		if s.Owner == 0 || t.names[s.Owner] != "" || t.unnamed[s.Owner] {
			continue
		}
		t.unnamed[s.Owner] = true // until the namer says otherwise
		unknown = append(unknown, s.Owner)
	}
	if len(unknown) > 0 {
		for owner, program := range name(unknown) {
			if program != "" && t.unnamed[owner] {
				delete(t.unnamed, owner)
				t.names[owner] = program
			}
		}
	}

	var reports []flow.Report
	seen := make(map[flow.Tuple]conn, len(scan))
	owners := make(map[uint64]bool, len(scan))
	for _, s := range scan {
		key := s.Tuple.Key()
		owners[s.Owner] = true
		if _, dup := seen[key]; dup {
			continue // several sockets on one key (SO_REUSEPORT): the first one speaks for all
		}
		prev, known := t.live[key]
		c := prev
		c.missing = false
		// A new nonzero owner on a known tuple is a new socket: closed and reopened between
		// scans. Owner 0 is the same connection outliving its process.
		if !known || (s.Owner != 0 && s.Owner != prev.owner) {
			c = conn{owner: s.Owner}
		}
		if c.program == "" {
			c.program = t.names[s.Owner]
			if c.program != "" {
				reports = append(reports, flow.Report{Tuple: s.Tuple, Program: c.program})
			}
		}
		seen[key] = c
	}
	// A dump of a large, changing table can miss a socket that is still there: a connection
	// is closed only when two scans in a row lack it, so a miss does not make it "new" again.
	for key, c := range t.live {
		if _, ok := seen[key]; !ok && !c.missing {
			c.missing = true
			seen[key] = c
			owners[c.owner] = true
		}
	}
	t.live = seen
	for owner := range t.names {
		if !owners[owner] {
			delete(t.names, owner)
		}
	}
	for owner := range t.unnamed {
		if !owners[owner] {
			delete(t.unnamed, owner)
		}
	}
	return reports
}

// Live is the number of connections tracked: those of the last scan, and those missing from
// it for the first time.
func (t *Tracker) Live() int { return len(t.live) }
