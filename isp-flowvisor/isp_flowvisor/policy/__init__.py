"""The slice policy: what a household may ask of the switch, and how its ids map onto it.

Pure functions of a household record and an os-ken message; no sockets. `Refused` carries the
OpenFlow error that answers a message outside the household's slice. Nothing is ever widened or
silently dropped: a message is translated exactly, or refused whole.

The modules, each one responsibility: `layout` (how the slices share the switch's tables and ids; see
README, "How slices share the switch"), `dispatch` (the slicer's own rules), `addresses` (the
flowspace's address fields), `keys` (a flow entry's identity), `ids` (a household's ids on the switch),
`devices` (its MACs), `contents` (what its rules and packets may contain), `requests` (household ->
switch), `reports` (switch -> household), `features` (its virtual switch as it describes itself).
`Slice` puts one household's together; callers import all they use from here.
"""

from __future__ import annotations

from ..model import Household
from .contents import MAX_COPIES, MAX_GROUP_COPIES, Contents
from .devices import LEARNT_MACS, Devices
from .dispatch import baseline_rules, delete_slicer_rules, dispatch_rules, slicer_cookie
from .features import group_features, meter_features, table_features
from .ids import Ids
from .keys import match_key, rule_key
from .layout import (
    COOKIE_BITS,
    COOKIE_LOW,
    COOKIE_SLOT_MASK,
    DSCP_OF_QUEUE,
    ETH_ARP,
    ETH_IPV4,
    ETH_IPV6,
    FIRST_HOUSEHOLD_TABLE,
    GROUPS_PER_HOUSEHOLD,
    HOUSEHOLD_TABLES,
    ID_SHIFT,
    MAX_PRIORITY,
    METERS_PER_HOUSEHOLD,
    QUEUE_NAMES,
    QUEUE_SHIFT,
    TABLE_DISPATCH,
    TABLE_FORWARD,
    slot_of_cookie,
)
from .refused import Refused
from .reports import Reports
from .requests import Requests

__all__ = [
    "COOKIE_BITS",
    "COOKIE_LOW",
    "COOKIE_SLOT_MASK",
    "DSCP_OF_QUEUE",
    "ETH_ARP",
    "ETH_IPV4",
    "ETH_IPV6",
    "FIRST_HOUSEHOLD_TABLE",
    "GROUPS_PER_HOUSEHOLD",
    "HOUSEHOLD_TABLES",
    "ID_SHIFT",
    "LEARNT_MACS",
    "MAX_COPIES",
    "MAX_GROUP_COPIES",
    "MAX_PRIORITY",
    "METERS_PER_HOUSEHOLD",
    "QUEUE_NAMES",
    "QUEUE_SHIFT",
    "TABLE_DISPATCH",
    "TABLE_FORWARD",
    "Contents",
    "Devices",
    "Ids",
    "Refused",
    "Reports",
    "Requests",
    "Slice",
    "baseline_rules",
    "delete_slicer_rules",
    "dispatch_rules",
    "group_features",
    "match_key",
    "meter_features",
    "rule_key",
    "slicer_cookie",
    "slot_of_cookie",
    "table_features",
]


class Slice:
    """One household's view of the switch: its ids, its ports (the shared ones and its own), its
    devices, and the checks and translations both ways: `requests` (household -> switch) and
    `reports` (switch -> household)."""

    def __init__(self, household: Household, shared_ports: frozenset[int]):
        self.household = household
        self.ids = Ids(household)
        self.view = frozenset(shared_ports) | frozenset(household.ports)
        self.devices = Devices(household)
        self.contents = Contents(self.ids, self.view, self.devices)
        self.requests = Requests(self.contents)
        self.reports = Reports(self.ids, self.view, self.devices)
