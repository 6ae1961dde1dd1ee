// Package source lists the host's TCP and UDP sockets and names the programs that own them,
// one implementation per operating system behind one interface.
//
// Linux: sock_diag over netlink for the table (about 1 ms for a thousand sockets) and a
// walk of /proc/PID/fd only for sockets not seen before, remembered between walks.
// macOS and Windows: gopsutil (lsof on macOS, GetExtendedTcpTable on Windows), where each
// socket comes with its process id and a program name is looked up once per process.
package source

import (
	"context"

	"homework/endhost-agent/internal/flow"
)

// Source is a connection table.
type Source interface {
	// Sockets lists every TCP and UDP socket, IPv4 and IPv6, with its owner (see flow.Socket).
	Sockets(ctx context.Context) ([]flow.Socket, error)
	// Programs names owners from the last Sockets call; owners it cannot find are absent.
	Programs(owners []uint64) map[uint64]string
	// Name says which implementation this is, for logs and the benchmark.
	Name() string
}
