package source

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"homework/endhost-agent/internal/agenterr"
	"homework/endhost-agent/internal/flow"
)

// Netlink is the Linux source: owners are socket inodes.
type Netlink struct {
	procs *procWalker
}

// NewNetlink returns the Linux source reading /proc at procRoot (normally "/proc").
func NewNetlink(procRoot string) *Netlink {
	return &Netlink{procs: newProcWalker(procRoot)}
}

func (*Netlink) Name() string { return "netlink" }

// A dump interrupted by a change of the table is retried this many times; after that the
// scan fails and the next one starts afresh (a partial table would look like closed sockets).
const dumpTries = 3

func (n *Netlink) Sockets(ctx context.Context) ([]flow.Socket, error) {
	var out []flow.Socket
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		for _, proto := range []flow.Proto{flow.TCP, flow.UDP} {
			if err := ctx.Err(); err != nil {
				return nil, agenterr.New("dump sockets", agenterr.Transient, err)
			}
			socks, err := dump(family, proto)
			if err != nil {
				return nil, err
			}
			out = append(out, socks...)
		}
	}
	alive := make(map[uint64]bool, len(out))
	for _, s := range out {
		alive[s.Owner] = true
	}
	n.procs.setAlive(alive)
	return out, nil
}

// Connection states asked of the kernel. TCP: everything that has a peer, including
// connections that outlive their process (FIN_WAIT, CLOSING, LAST_ACK) but not TIME_WAIT,
// which only remembers a closed connection, nor listeners. UDP: all (an unconnected UDP
// socket is "closed", a connected one "established").
const (
	tcpStates = 1<<1 | 1<<2 | 1<<3 | 1<<4 | 1<<5 | 1<<8 | 1<<9 | 1<<11 // ESTABLISHED .. FIN_WAIT2, CLOSE_WAIT, LAST_ACK, CLOSING
	udpStates = 0xfff
)

// diagRequest is struct inet_diag_req_v2 asking for no extensions: the socket table alone,
// about half the kernel's work of netlink.SocketDiagTCP, which asks for tcp_info too.
type diagRequest struct {
	family, protocol uint8
	states           uint32
}

const sizeofDiagRequest = 56

func (r *diagRequest) Len() int { return sizeofDiagRequest }

func (r *diagRequest) Serialize() []byte {
	b := make([]byte, sizeofDiagRequest)
	b[0], b[1] = r.family, r.protocol
	binary.NativeEndian.PutUint32(b[4:], r.states)
	return b // the socket id is all zero: any socket
}

// sizeofDiagMsg is struct inet_diag_msg: family, state, timer, retrans, the socket id
// (ports, addresses, interface, cookie), expires, queues, uid, inode.
const sizeofDiagMsg = 72

func dump(family uint8, proto flow.Proto) ([]flow.Socket, error) {
	states := uint32(udpStates)
	if proto == flow.TCP {
		states = tcpStates
	}
	op := "dump " + proto.String() + " sockets (sock_diag)"
	for try := 1; ; try++ {
		var out []flow.Socket
		req := nl.NewNetlinkRequest(nl.SOCK_DIAG_BY_FAMILY, unix.NLM_F_DUMP)
		req.AddData(&diagRequest{family: family, protocol: uint8(proto), states: states})
		err := req.ExecuteIter(unix.NETLINK_INET_DIAG, nl.SOCK_DIAG_BY_FAMILY, func(msg []byte) bool {
			if len(msg) < sizeofDiagMsg {
				return true
			}
			out = append(out, flow.Socket{Tuple: tupleOf(proto, msg), Owner: uint64(binary.NativeEndian.Uint32(msg[68:]))})
			return true
		})
		switch {
		case err == nil:
			return out, nil
		case errors.Is(err, nl.ErrDumpInterrupted) && try < dumpTries:
			continue
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPROTONOSUPPORT):
			return nil, agenterr.New(op, agenterr.Fatal, err)
		default:
			return nil, agenterr.New(op, agenterr.Transient, err)
		}
	}
}

// tupleOf reads the socket id of an inet_diag_msg: ports in network order at 4 and 6, the
// source address at 8 and the destination at 24 (16 bytes each, IPv4 in the first 4).
func tupleOf(proto flow.Proto, msg []byte) flow.Tuple {
	addr := func(b []byte) netip.Addr {
		if msg[0] == unix.AF_INET {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16([16]byte(b[:16]))
	}
	return flow.Tuple{
		Proto:  proto,
		Local:  netip.AddrPortFrom(addr(msg[8:]), binary.BigEndian.Uint16(msg[4:])),
		Remote: netip.AddrPortFrom(addr(msg[24:]), binary.BigEndian.Uint16(msg[6:])),
	}
}

func (n *Netlink) Programs(inodes []uint64) map[uint64]string { return n.procs.find(inodes) }
