"""The I/O edge: the os-ken app (`ofapp`), ws.v1's health it reports (`edge_status`) and the parts it is given
(`assembly`), in three packages: `switch/` (the switch's connection, fair serving, the effect sink and the router's
other callers), `lan/` (what the router serves and sets up on the LAN: sockets, netlink, nftables, tc, the IPv6
prefixes' files) and `feeds/` (hwdb both ways, the switch's flow records, the ISP slice, the log). Here beside them,
what those share: `outbox`, `supervised`, `startup`. May import every layer; no layer imports it."""
