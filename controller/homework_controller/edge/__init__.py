"""The I/O edge: the os-ken app (`ofapp`) and the parts it is given (`assembly`: the switch's connection, the effect
sink, fair serving, periodic jobs, station events), the sockets (DHCP, the resolver), netlink, tc, hwdb, the
slicer's link, the flow-export collector, the IPv6 prefixes' files, ws.v1's health. May import every layer; no
layer imports it."""
