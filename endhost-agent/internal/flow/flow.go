// Package flow holds what the agent talks about: a connection's tuple as this host sees it,
// a socket observed by a connection source, the report sent to the router, and the scope
// rule that decides which connections cross the router (the only ones ever reported).
package flow

import (
	"fmt"
	"net/netip"
)

// Proto is an IP protocol number as hwdb's AppTuples stores it.
type Proto uint8

const (
	TCP Proto = 6
	UDP Proto = 17
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// Tuple is a connection from this host's side: Local is ours. An unconnected UDP socket has
// an invalid (zero) Remote: the kernel's table holds no peer for it.
type Tuple struct {
	Proto  Proto
	Local  netip.AddrPort
	Remote netip.AddrPort
}

// Unconnected reports a socket with no peer in the kernel's table (unconnected UDP).
func (t Tuple) Unconnected() bool {
	return !t.Remote.IsValid() || t.Remote.Addr().IsUnspecified()
}

// Key identifies a connection across scans. An unconnected UDP socket sends to many peers
// from one local port, so it is keyed on that port alone; everything else on its full tuple.
func (t Tuple) Key() Tuple {
	if t.Unconnected() {
		return Tuple{Proto: t.Proto, Local: t.Local}
	}
	return t
}

func (t Tuple) String() string {
	if t.Unconnected() {
		return fmt.Sprintf("%s %s -> *", t.Proto, t.Local)
	}
	return fmt.Sprintf("%s %s -> %s", t.Proto, t.Local, t.Remote)
}

// Socket is one row of a connection source's table. Owner identifies what holds the socket
// (its inode on Linux, its process id elsewhere); 0 means nothing does any more (a TCP
// connection lingering after its process closed it or exited).
type Socket struct {
	Tuple Tuple
	Owner uint64
}

// Report is one AppTuples row the agent sends: a connection and the program that owns it.
type Report struct {
	Tuple   Tuple
	Program string
}

// Scope is this host's place behind the router: its own address on the router-facing
// interface and that interface's prefix (peers inside it are reached without the router).
type Scope struct {
	Self   netip.Addr
	OnLink netip.Prefix
}

// Through returns the tuple as the router sees it and whether the connection crosses the
// router: it leaves from our router-facing address (or a wildcard-bound UDP socket, which
// then speaks from that address) towards a peer that is not on the local link. Loopback
// traffic never leaves from the router-facing address, so it is never reported.
func (s Scope) Through(t Tuple) (Tuple, bool) {
	if t.Unconnected() && t.Proto != UDP {
		return t, false // a listener: the connections it accepts are reported, not it
	}
	local := t.Local.Addr().Unmap()
	switch {
	case local == s.Self:
	case local.IsUnspecified() && t.Unconnected():
		t.Local = netip.AddrPortFrom(s.Self, t.Local.Port())
	default:
		return t, false
	}
	t.Local = netip.AddrPortFrom(t.Local.Addr().Unmap(), t.Local.Port())
	if t.Unconnected() {
		t.Remote = netip.AddrPort{}
		return t, true
	}
	remote := t.Remote.Addr().Unmap()
	t.Remote = netip.AddrPortFrom(remote, t.Remote.Port())
	return t, !s.OnLink.Contains(remote)
}
