"""The switch's rule set, compiled from state by pure functions (the rules layer: imports wire and the root's
`model`, never a concern).

Rules are plain values (`FlowRule`) with os-ken OFPMatch field names; `openflow.py` turns
them into FlowMods. Four tables keep rule counts additive. Rule priorities are named bands
per table (`AdmissionPriority`, `AccountingPriority`, `MarkingPriority`, `RoutingPriority`), highest first:

Every access port (the radio's, and wired ports where devices plug in) is "wlan" below: a device is
bound to one of them, its own (where it was first seen), and its rules accept its frames there only.

table 0, admission: what may enter at all.
  TAGGED         wlan: any VLAN-tagged frame, or one to a port mark    -> drop (a station sends untagged frames;
                                                                          only the switch writes port marks)
  BLACKLISTED    blacklisted device (from it, or to it)                -> drop
  ELSEWHERE      wlan: a bound device's MAC on another access port     -> newcomers' meter, controller (a moved
                                                                          device, or a copied MAC: `port_binding`)
  DEVICE_CONTROL wlan: a known device's DHCP (broadcast, or to its      -> its own meter, then the router (the
                 gateway) / EAPOL                                         controller's DHCP socket) / hostapd
  CONTROL        wlan: broadcast DHCP / EAPOL from anyone else         -> newcomers' meter, router / hostapd
                 router: EAPOL, DHCP answers                           -> the device's own port (to a bound
                                                                          device), else every access port
  DHCP to the router is marked with the access port it came in on (its destination MAC becomes the
  port's mark, `port_mark`), so the DHCP socket knows where a device is without a packet-in.
  DEVICE_ARP     wlan: a known device's ARP                            -> its own meter, controller
  ARP            wlan or router: ARP                                   -> (newcomers' meter,) controller (proxy ARP)
  ADVERTS        wlan: IPv6 neighbour, redirect and router adverts     -> drop (`flows_v6`: the router's stack
                 (but a forwarding device's own router adverts)           hears of devices from the controller only)
  SOURCE_CHECKED wlan: permitted device, its MAC *and* its IP          -> goto 1
                 router: IPv4 to a permitted device's MAC              -> goto 1
  MISS           anything else                                         -> drop
table 1, accounting: what each device sends and receives, counted (allowances read these counters).
  BLOCKED        device to an address learnt for a name blocked for it -> drop
  LEARNT_FLOW    a flow with a rule of its own (exact 5-tuple, 30 s     -> mark DSCP (and queue) for its app's
                 idle timeout): an agent named it, or its behaviour in    priority, goto 3
                 the switch's records was judged
  DEVICE_SOURCE  a permitted device's traffic (sent by it), and
  DEVICE_DEST    traffic to it                                         -> DSCP 0, goto 2
  MISS           anything else                                         -> goto 2
table 2, marking: a connection's mark decided ahead of its first packet (`marks.py`).
  BY_AGENT       a device's socket its agent named (proto, its port)   -> mark for that app's priority, goto 3
  BY_NAME        a device and an address its lookups named for an app  -> mark for that app's priority, goto 3
  DEMOTED_PORT   a device over its share of High: its High apps' ports -> Medium, goto 3
  BY_PORT        an app's service port, either end (any device)        -> mark for that app's priority, goto 3
  MISS           anything else                                         -> goto 3 (Normal)
table 3, routing:
  TO_DEVICE      from wlan, to a permitted device's address            -> rewrite MACs, dec TTL, out its own port
                 from the router, to a permitted device's address      -> its MAC set (never the stack's neighbour
                                                                          entry's), its own port
  BROADCAST      from a permitted device: to 255.255.255.255, 224.0.0.0/4 or the sender's /30
                 broadcast                                             -> one unicast copy to each *other* permitted
                                                                          device, and the router: a pending or
                                                                          denied device hears none of it (the copies
                                                                          in groups of type ALL, a group per block of
                                                                          devices: `base_flows.BroadcastCopies`)
                 (IPv6's twin, UDP to ff02::/16 such as mDNS's ff02::fb: `flows_v6.multicast_rules`)
  MISS           anything else                                         -> router (its stack routes and NATs)

The package: `values.py` (the tables, bands, actions, meters and a rule), `shapes.py` (a forwarding
device's rules, one builder per shape for IPv4 and IPv6 alike), `device.py` (a device's own rules:
`DeviceRules`, `device_rules`), `marks.py` (the marking table's rules), `captive.py` (a held-back
device's way to the portal). The rules the
switch holds whatever devices there are, and broadcast, are `base_flows.py`; IPv6's are `flows_v6.py`.
"""

from .captive import portal_rules
from .device import DeviceRules, GateRules, device_rules, dns_block_rule, learnt_flow_rule
from .marks import (
    PORT_MARKS_COOKIE,
    demoted_port_marks,
    marks_cookie,
    name_marks,
    port_marks,
    port_matches,
    socket_marks,
)
from .shapes import IPV4, Family, address_blocked, admitted, counted, encrypted_dns_refused, routed_to
from .values import (
    ALL_HOSTS,
    ANY_PORT_MARK,
    BASE_COOKIE,
    BROADCAST_COOKIE,
    CONTROLLER,
    DEVICE_COOKIE_MASK,
    DEVICE_METER_BURST,
    DEVICE_METER_PPS,
    DHCP_CLIENT_PORT,
    DHCP_SERVER_PORT,
    DNS_OVER_TLS_PORT,
    DNS_PORT,
    ETH_ARP,
    ETH_EAPOL,
    ETH_IPV4,
    FLOW_IDLE_TIMEOUT_S,
    IN_PORT,
    LOCAL,
    MULTICAST,
    NEWCOMERS_METER,
    PORT_MARK_PREFIX,
    PORTAL_METER_BURST,
    PORTAL_METER_PPS,
    PROTO_TCP,
    PROTO_UDP,
    TABLE_ACCOUNTING,
    TABLE_ADMISSION,
    TABLE_MARKING,
    TABLE_ROUTING,
    VLAN_PRESENT,
    AccountingPriority,
    AdmissionPriority,
    CopyGroup,
    DecTtl,
    FiveTuple,
    FlowRule,
    GotoTable,
    Group,
    MarkingPriority,
    Meter,
    MeterBand,
    Output,
    RoutingPriority,
    SetField,
    SetQueue,
    device_cookie,
    device_meter,
    masked,
    outputs_to,
    port_mark,
    port_of_mark,
    portal_meter_of,
    rule,
)

__all__ = [
    "PORT_MARKS_COOKIE",
    "demoted_port_marks",
    "marks_cookie",
    "name_marks",
    "port_marks",
    "port_matches",
    "socket_marks",
    "masked",
    "ALL_HOSTS",
    "ANY_PORT_MARK",
    "AccountingPriority",
    "MarkingPriority",
    "AdmissionPriority",
    "BASE_COOKIE",
    "BROADCAST_COOKIE",
    "CONTROLLER",
    "DEVICE_COOKIE_MASK",
    "DEVICE_METER_BURST",
    "DEVICE_METER_PPS",
    "PORTAL_METER_BURST",
    "PORTAL_METER_PPS",
    "DHCP_CLIENT_PORT",
    "DHCP_SERVER_PORT",
    "DNS_OVER_TLS_PORT",
    "DNS_PORT",
    "CopyGroup",
    "DecTtl",
    "DeviceRules",
    "GateRules",
    "ETH_ARP",
    "ETH_EAPOL",
    "ETH_IPV4",
    "FLOW_IDLE_TIMEOUT_S",
    "Family",
    "FiveTuple",
    "FlowRule",
    "GotoTable",
    "Group",
    "IN_PORT",
    "IPV4",
    "LOCAL",
    "MULTICAST",
    "Meter",
    "MeterBand",
    "NEWCOMERS_METER",
    "Output",
    "PORT_MARK_PREFIX",
    "PROTO_TCP",
    "PROTO_UDP",
    "RoutingPriority",
    "SetField",
    "SetQueue",
    "TABLE_ACCOUNTING",
    "TABLE_ADMISSION",
    "TABLE_MARKING",
    "TABLE_ROUTING",
    "VLAN_PRESENT",
    "address_blocked",
    "admitted",
    "counted",
    "device_cookie",
    "device_meter",
    "device_rules",
    "dns_block_rule",
    "encrypted_dns_refused",
    "learnt_flow_rule",
    "outputs_to",
    "port_mark",
    "port_of_mark",
    "portal_meter_of",
    "portal_rules",
    "routed_to",
    "rule",
]
