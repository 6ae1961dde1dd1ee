package source

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"

	psnet "github.com/shirou/gopsutil/v4/net"
	"github.com/shirou/gopsutil/v4/process"

	"homework/endhost-agent/internal/agenterr"
	"homework/endhost-agent/internal/flow"
)

// Gopsutil is the portable source: owners are process ids. On Linux it walks all of /proc on
// every call (the baseline the netlink source is measured against); on macOS it runs lsof.
type Gopsutil struct{}

func (Gopsutil) Name() string { return "gopsutil" }

func (Gopsutil) Sockets(ctx context.Context) ([]flow.Socket, error) {
	conns, err := psnet.ConnectionsWithContext(ctx, "inet")
	if err != nil {
		return nil, agenterr.New("list connections (gopsutil)", agenterr.Transient, err)
	}
	out := make([]flow.Socket, 0, len(conns))
	for _, c := range conns {
		var proto flow.Proto
		switch c.Type {
		case syscall.SOCK_STREAM:
			proto = flow.TCP
		case syscall.SOCK_DGRAM:
			proto = flow.UDP
		default:
			continue
		}
		local, ok := parseAddr(c.Laddr.IP)
		if !ok {
			continue
		}
		t := flow.Tuple{Proto: proto, Local: netip.AddrPortFrom(local, uint16(c.Laddr.Port))}
		if remote, ok := parseAddr(c.Raddr.IP); ok {
			t.Remote = netip.AddrPortFrom(remote, uint16(c.Raddr.Port))
		}
		out = append(out, flow.Socket{Tuple: t, Owner: uint64(c.Pid)})
	}
	return out, nil
}

func (Gopsutil) Programs(pids []uint64) map[uint64]string {
	out := make(map[uint64]string, len(pids))
	for _, pid := range pids {
		p, err := process.NewProcess(int32(pid))
		if err != nil {
			continue // exited
		}
		if exe, err := p.Exe(); err == nil && exe != "" {
			out[pid] = programName(exe)
		} else if name, err := p.Name(); err == nil && name != "" {
			out[pid] = name
		}
	}
	return out
}

// parseAddr reads an address as gopsutil gives it: lsof (macOS) writes the wildcard as "*"
// and IPv6 in brackets; an empty string (no peer) is no address.
func parseAddr(s string) (netip.Addr, bool) {
	if s == "*" {
		return netip.IPv4Unspecified(), true
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	return a, err == nil
}

// programName is an executable's base name without a Windows ".exe", as a household would
// recognise it ("firefox", "zoom").
func programName(exe string) string {
	base := filepath.Base(exe)
	if ext := filepath.Ext(base); ext == ".exe" || ext == ".EXE" {
		base = base[:len(base)-len(ext)]
	}
	return base
}
