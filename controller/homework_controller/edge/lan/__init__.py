"""What the router serves to LAN devices and sets up in its own stack for them: the DHCP socket (`dhcp_port`), the
resolver (`dns_server`), its addresses on the LAN interface (`lan_addresses`, netlink), the redirects and the route
the resolver and the portal need (`lan_side`, nftables), the shapers on both interfaces (`shaper`, tc) and the IPv6
prefixes' files (`ipv6_files`). None of it knows the switch."""
