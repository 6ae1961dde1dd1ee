// Package discovery finds the router: the default gateway, this host's address towards it
// and that interface's prefix. Nothing to configure in the common case.
package discovery

import (
	"net"
	"net/netip"

	"github.com/jackpal/gateway"

	"homework/endhost-agent/internal/agenterr"
	"homework/endhost-agent/internal/flow"
)

// HWDBPort is where the router's hwdb listens for agents.
const HWDBPort = 987

// Router is what the agent needs to know about where it stands.
type Router struct {
	Gateway netip.Addr
	Scope   flow.Scope
}

// HWDB is the router's hwdb RPC address.
func (r Router) HWDB() string { return netip.AddrPortFrom(r.Gateway, HWDBPort).String() }

// Find discovers the default gateway (from the OS's routing table) and the router-facing
// address and prefix; gatewayOverride, when valid, replaces the discovery of the gateway.
func Find(gatewayOverride netip.Addr) (Router, error) {
	gw := gatewayOverride
	if !gw.IsValid() {
		ip, err := gateway.DiscoverGateway()
		if err != nil {
			return Router{}, agenterr.New("find the default gateway", agenterr.Fatal, err)
		}
		var ok bool
		if gw, ok = netip.AddrFromSlice(ip); !ok {
			return Router{}, agenterr.New("find the default gateway", agenterr.Fatal, net.InvalidAddrError(ip.String()))
		}
		gw = gw.Unmap()
	}
	self, err := sourceAddress(gw)
	if err != nil {
		return Router{}, err
	}
	return Router{Gateway: gw, Scope: flow.Scope{Self: self, OnLink: onLinkPrefix(self, interfacePrefixes())}}, nil
}

// sourceAddress is the address the OS would send from to reach gw. Connecting a UDP socket
// sends nothing: it only asks the routing table.
func sourceAddress(gw netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(gw, HWDBPort)))
	if err != nil {
		return netip.Addr{}, agenterr.New("find the address towards the router", agenterr.Fatal, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

func interfacePrefixes() []netip.Prefix {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ip, _ := netip.AddrFromSlice(n.IP)
			ones, _ := n.Mask.Size()
			out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
		}
	}
	return out
}

// onLinkPrefix is the prefix of the interface address self, or self alone (a /32) if no
// interface holds it: then only the address itself counts as local.
func onLinkPrefix(self netip.Addr, prefixes []netip.Prefix) netip.Prefix {
	for _, p := range prefixes {
		if p.Addr() == self {
			return p.Masked()
		}
	}
	return netip.PrefixFrom(self, self.BitLen())
}
