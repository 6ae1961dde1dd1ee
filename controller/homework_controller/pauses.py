"""Pausing a device, the concern (a per-device policy): the household pauses a device now and
resumes it later; while paused its traffic is not forwarded (its DHCP and ARP still are, so it keeps
its lease and is back at once). In memory: a restart of the controller resumes every device.
"""

from __future__ import annotations


class Pauses:
    def __init__(self):
        self._paused: set[str] = set()

    def knows(self, mac: str) -> bool:
        return mac in self._paused

    def forget(self, mac: str) -> None:
        self._paused.discard(mac)

    def may_forward(self, mac: str) -> bool:
        return mac not in self._paused

    def status_of(self, mac: str) -> dict:
        return {"paused": mac in self._paused}

    def pause(self, mac: str) -> None:
        self._paused.add(mac)

    def resume(self, mac: str) -> None:
        self._paused.discard(mac)
