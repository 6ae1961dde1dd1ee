"""How the slices share the physical switch: its tables, the cookie, meter, group and queue ids of
each household's slot, the DSCP each queue is marked with, the Ethernet types of the flowspace.

- table 0 (the slicer's): one rule per household address block (IPv4 or IPv6) sends its traffic,
  tagged with the household's slot in the metadata register, to table 1; traffic to a household has
  its DSCP cleared there, so only a slice rule can choose a queue. Traffic of no household goes to
  the forwarding table.
- tables 1..HOUSEHOLD_TABLES: the households' virtual tables 0..HOUSEHOLD_TABLES-1. Every household
  rule also matches metadata == its slot, so it only ever sees its own traffic; a miss goes on to
- the forwarding table (the slicer's): NORMAL.
"""

from __future__ import annotations

HOUSEHOLD_TABLES = 4
TABLE_DISPATCH = 0
FIRST_HOUSEHOLD_TABLE = 1
TABLE_FORWARD = FIRST_HOUSEHOLD_TABLE + HOUSEHOLD_TABLES
COOKIE_BITS = 40
COOKIE_LOW = (1 << COOKIE_BITS) - 1
COOKIE_SLOT_MASK = ((1 << 64) - 1) ^ COOKIE_LOW
MAX_PRIORITY = 0xFFFE  # a household's rule priority p is p + 1 on the switch: the slicer's misses sit at 0
METERS_PER_HOUSEHOLD = 16
GROUPS_PER_HOUSEHOLD = 16
ID_SHIFT = 4  # meters and groups: (slot << 4) | (id - 1)
QUEUE_SHIFT = 2  # physical queue ids: (slot << 2) | queue
QUEUE_NAMES = {0: "normal", 1: "medium", 2: "high"}
# The DSCP a household's queue choice becomes on the downlink: tc classifies on it (queues.py).
DSCP_OF_QUEUE = {0: 0, 1: 18, 2: 46}
ETH_IPV4 = 0x0800
ETH_ARP = 0x0806
ETH_IPV6 = 0x86DD


def slot_of_cookie(cookie: int) -> int:
    return cookie >> COOKIE_BITS
