"""Pausing a device and its bedtime, the concern (a per-device policy): the household pauses a device
now (until resumed, or until a time: for 30 minutes, an hour, until tomorrow's reset), or gives it a
weekly schedule (`schedules.py`); while paused its traffic is not forwarded (its DHCP and ARP still
are, so it keeps its lease and is back at once).

Resuming a device during its bedtime lets it online until that window ends (tonight's exception);
the next window pauses it again. Pauses, schedules and exceptions are on the disk: a restart of the
controller keeps them. Whether a device is held is worked out when something changes, and again on
the first tick after the instant it may next change (a pause's end, a window's start or end, worked
out then): a tick costs a comparison per device, and `may_forward`, asked for every device on every
tick and every DHCP message, is a dict lookup.
"""

from __future__ import annotations

from collections.abc import Callable

from ..lifecycle import move_key
from ..policy import schedules
from ..policy.schedules import Window

PAUSED, BEDTIME = "paused", "bedtime"
NEVER = float("inf")


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
        self._next: dict[str, float] = {}  # mac -> when its hold may next change
        self._zone_version = household.version
        self.recompute_all()

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self._paused or mac in self._schedules or mac in self._excused or mac in self._held

    def forget(self, mac: str) -> None:
        for memory in (self._paused, self._excused, self._schedules, self._held, self._next):
            memory.pop(mac, None)

    def move(self, old_mac: str, new_mac: str) -> None:
        move_key(old_mac, new_mac, self._paused, self._excused, self._schedules, self._held, self._next)

    def may_forward(self, mac: str) -> bool:
        return mac not in self._held

    def hold_of(self, mac: str) -> tuple[str, float | None] | None:
        """Why the device is paused ("paused" | "bedtime") and until when (None: until resumed)."""
        return self._held.get(mac)

    def status_of(self, mac: str) -> dict:
        return {"schedule": schedules.text(self._schedules.get(mac, ()))}

    def tick(self, now: float) -> set[str]:
        """Pauses that ran out, bedtimes that began or ended: the devices whose hold changed."""
        if self._zone_version != self.household.version:  # the household's zone changed: read every schedule in it
            return self.recompute_all()
        return {mac for mac in [m for m, when in self._next.items() if when <= now] if self._recompute(mac, now)}

    def recompute_all(self) -> set[str]:
        """Every device's hold worked out afresh (at start, and when the household's zone or reset changed)."""
        self._zone_version = self.household.version
        now = self.clock()
        return {mac for mac in set(self._held) | set(self._paused) | set(self._schedules) if self._recompute(mac, now)}

    # -- the household's decisions

    def pause(self, mac: str, until: float | None = None) -> None:
        """Paused now, until `until` (epoch seconds) or, with None, until resumed."""
        self._paused[mac] = until
        self._excused.pop(mac, None)
        self._save(mac)
        self._recompute(mac, self.clock())

    def resume(self, mac: str, bedtime: bool = True) -> None:
        """Online again now: a pause ends, and (with `bedtime`: the schedule's owner resumes it) a running
        bedtime lets it go until that window ends; without, the bedtime holds it still."""
        now = self.clock()
        self._paused.pop(mac, None)
        bedtime_ends = schedules.running(self._schedules.get(mac, ()), now, self.household.tz)
        if bedtime_ends is not None and bedtime:
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

    # -- internals

    def _recompute(self, mac: str, now: float) -> bool:
        """The device's hold now, and when it may next change; whether the hold changed."""
        if (until := self._paused.get(mac)) is not None and until <= now:  # the pause ran out
            del self._paused[mac]
            self._save(mac)
        if self._excused.get(mac, NEVER) <= now:  # tonight's exception ended with its window
            del self._excused[mac]
            self._save(mac)
        windows = self._schedules.get(mac, ())
        bedtime_ends = schedules.running(windows, now, self.household.tz) if windows else None
        hold: tuple[str, float | None] | None = None
        if mac in self._paused:
            hold = (PAUSED, self._paused[mac])
        elif bedtime_ends is not None and mac not in self._excused:
            hold = (BEDTIME, bedtime_ends)
        # When this may change next: the pause's end, the exception's, the bedtime's end or the next one's start.
        changes = [self._paused.get(mac) or NEVER, self._excused.get(mac, NEVER)]
        if bedtime_ends is not None:
            changes.append(bedtime_ends)
        elif windows:
            changes.append(schedules.next_start(windows, now, self.household.tz) or NEVER)
        if min(changes) < NEVER:
            self._next[mac] = min(changes)
        else:
            self._next.pop(mac, None)
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
