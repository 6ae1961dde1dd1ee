"""What is on the wire, pure: frames and DHCP/ND messages parsed and built (`packets`, `dhcp_wire`, `nd`), the LAN's
IPv4 addresses (`lan`: the /30s, the router's and the portal's) and the IPv6 prefix plan (`prefixes`).
Imports nothing of the controller's."""
