"""The MACs a household owns at layer 2."""

from __future__ import annotations

from ..model import Household

# MACs the slicer learns per household from packet-ins on its private ports (its devices).
LEARNT_MACS = 256


class Devices:
    """The MACs a household owns at layer 2: its CPE's (the registry's) and its devices', learnt as the
    source of packets that came in on its private ports, most recent last. The relay carries the learnt
    ones over when the record changes and the ports stay."""

    def __init__(self, household: Household):
        self.household = household
        self.learnt: dict[str, None] = {}

    def owns(self, mac: str) -> bool:
        mac = mac.lower()
        return mac in self.household.macs or mac in self.learnt

    def learn(self, in_port: int | None, data: bytes) -> None:
        if in_port not in self.household.ports or len(data) < 12:
            return
        mac = data[6:12].hex(":")
        if data[6] & 1:
            return  # a group address is never a device's own
        self.learnt.pop(mac, None)
        self.learnt[mac] = None
        if len(self.learnt) > LEARNT_MACS:
            del self.learnt[next(iter(self.learnt))]
