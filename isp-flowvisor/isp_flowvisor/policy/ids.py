"""A household's ids (cookies, queues, meters, groups) on the switch, both ways, and which addresses
are its own."""

from __future__ import annotations

from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp

from ..model import Household
from .addresses import _network
from .layout import (
    COOKIE_BITS,
    COOKIE_LOW,
    GROUPS_PER_HOUSEHOLD,
    ID_SHIFT,
    METERS_PER_HOUSEHOLD,
    QUEUE_NAMES,
    QUEUE_SHIFT,
    slot_of_cookie,
)
from .refused import Refused


class Ids:
    """How a household's ids and addresses map onto the switch's, both ways: its cookies, queues, meters
    and groups, and which addresses are its own. It reads the household (its slot, its addresses) and
    nothing of the slice's state (its learnt MACs, its caches). The fast path's caches are keyed on it
    (by identity: a new slice, a new one), so they keep no replaced slice alive."""

    __slots__ = ("household", "slot")

    def __init__(self, household: Household):
        self.household, self.slot = household, household.slot

    def owns(self, value: Any) -> bool:
        """Is this match or set_field value (an address, or address and mask) inside the household's?"""
        network = _network(value)
        return network is not None and self.household.owns(network)

    def cookie(self, cookie: int) -> int:
        return (self.slot << COOKIE_BITS) | (cookie & COOKIE_LOW)

    def owns_cookie(self, cookie: int) -> bool:
        return slot_of_cookie(cookie) == self.slot

    def queue(self, queue_id: int) -> int:
        if queue_id not in QUEUE_NAMES:
            raise Refused(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_QUEUE, f"queue {queue_id}: only 0, 1, 2")
        return (self.slot << QUEUE_SHIFT) | queue_id

    def owns_queue(self, physical_queue: int) -> bool:
        return physical_queue >> QUEUE_SHIFT == self.slot and physical_queue & 3 in QUEUE_NAMES

    def _scoped(self, count: int, value: int, what: str, err: tuple[int, int]) -> int:
        if not 1 <= value <= count:
            raise Refused(*err, f"{what} {value} outside 1..{count}")
        return (self.slot << ID_SHIFT) | (value - 1)

    def meter(self, meter_id: int) -> int:
        return self._scoped(
            METERS_PER_HOUSEHOLD, meter_id, "meter", (ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_INVALID_METER)
        )

    def group(self, group_id: int) -> int:
        return self._scoped(
            GROUPS_PER_HOUSEHOLD, group_id, "group", (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_INVALID_GROUP)
        )

    def owns_scoped(self, physical_id: int) -> bool:
        """Is this meter or group id on the switch one of the household's?"""
        return physical_id >> ID_SHIFT == self.slot

    @staticmethod
    def unscoped(physical_id: int) -> int:
        return (physical_id & ((1 << ID_SHIFT) - 1)) + 1
