"""Pausing a device and its bedtime, the concern (a per-device policy): the household pauses a device
now (until resumed, or until a time: for 30 minutes, an hour, until tomorrow's reset), or gives it a
weekly schedule (`schedules.py`); while paused its traffic is not forwarded (its DHCP and ARP still
are, so it keeps its lease and is back at once).

Resuming a device during its bedtime lets it online until that window ends (tonight's exception);
the next window pauses it again. Pauses, schedules and exceptions are on the disk: a restart of the
controller keeps them. Whether a device is held is worked out when something changes and on every
tick (`tick`), so `may_forward`, asked for every device on every tick and every DHCP message, is a
set lookup.
"""

from __future__ import annotations

from collections.abc import Callable

from . import schedules
from .schedules import Window

PAUSED, BEDTIME = "paused", "bedtime"


class Pauses:
    def __init__(self, store, clock: Callable[[], float], household: schedules.HouseholdTime):
        self.store, self.clock, self.household = store, clock, household
        self._paused: dict[str, float | None] = {}  # mac -> until when (None: until resumed)
        self._excused: dict[str, float] = {}  # mac -> until when its schedule lets it online (resumed)
        self._schedules: dict[str, tuple[Window, ...]] = {}
        for mac, (paused, until, excused) in store.load_pauses().items():
            if paused:
                self._paused[mac] = until
            if excused:
                self._excused[mac] = excused
        for mac, text in store.load_schedules().items():
            self._schedules[mac] = schedules.parse(text)
        self._held: dict[str, tuple[str, float | None]] = {}  # mac -> (why, until when)
        self.tick(clock())

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self._paused or mac in self._schedules or mac in self._excused or mac in self._held

    def forget(self, mac: str) -> None:
        for memory in (self._paused, self._excused, self._schedules, self._held):
            memory.pop(mac, None)

    def may_forward(self, mac: str) -> bool:
        return mac not in self._held

    def hold_of(self, mac: str) -> tuple[str, float | None] | None:
        """Why the device is paused ("paused" | "bedtime") and until when (None: until resumed)."""
        return self._held.get(mac)

    def status_of(self, mac: str) -> dict:
        return {"schedule": schedules.text(self._schedules.get(mac, ()))}

    def tick(self, now: float) -> set[str]:
        """Pauses that ran out, bedtimes that began or ended: the devices whose hold changed."""
        for mac in [m for m, until in self._paused.items() if until is not None and until <= now]:
            del self._paused[mac]
            self._save(mac)
        for mac in [m for m, until in self._excused.items() if until <= now]:
            del self._excused[mac]
            self._save(mac)
        changed = set()
        for mac in set(self._held) | set(self._paused) | set(self._schedules):
            if self._recompute(mac, now):
                changed.add(mac)
        return changed

    # -- the household's decisions

    def pause(self, mac: str, until: float | None = None) -> None:
        """Paused now, until `until` (epoch seconds) or, with None, until resumed."""
        self._paused[mac] = until
        self._excused.pop(mac, None)
        self._save(mac)
        self._recompute(mac, self.clock())

    def resume(self, mac: str) -> None:
        """Online again now: a pause ends, and a running bedtime lets it go until that window ends."""
        now = self.clock()
        self._paused.pop(mac, None)
        bedtime_ends = schedules.running(self._schedules.get(mac, ()), now, self.household.tz)
        if bedtime_ends is not None:
            self._excused[mac] = bedtime_ends
        self._save(mac)
        self._recompute(mac, now)

    def set_schedule(self, mac: str, windows: tuple[Window, ...]) -> None:
        if windows:
            self._schedules[mac] = windows
        else:
            self._schedules.pop(mac, None)
        self._excused.pop(mac, None)  # a new schedule starts without tonight's exception
        self.store.save_schedule(mac, schedules.text(windows))
        self._save(mac)
        self._recompute(mac, self.clock())

    def recompute_all(self) -> set[str]:
        """The household's time zone changed: every schedule is read in the new one."""
        return self.tick(self.clock())

    # -- internals

    def _recompute(self, mac: str, now: float) -> bool:
        hold: tuple[str, float | None] | None = None
        if mac in self._paused:
            hold = (PAUSED, self._paused[mac])
        elif mac not in self._excused:
            ends = schedules.running(self._schedules.get(mac, ()), now, self.household.tz)
            if ends is not None:
                hold = (BEDTIME, ends)
        if hold == self._held.get(mac):
            return False
        if hold is None:
            del self._held[mac]
        else:
            self._held[mac] = hold
        return True

    def _save(self, mac: str) -> None:
        paused = mac in self._paused
        self.store.save_pause(mac, paused, self._paused.get(mac), self._excused.get(mac, 0.0))
