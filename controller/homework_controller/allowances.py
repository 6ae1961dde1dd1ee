"""Daily allowances, pure: how much a device may use between two of the household's resets, in
time online or in data, and how much it has used, counted from the router's own flow counters.

- **data**: bytes both ways, every byte the accounting table counted for the device's address
  (what its flows' rules and its own rules counted, and what the controller counted of a flow's
  first packets), as the `Flows` rows report them.
- **time online**: whole minutes with traffic. The day is cut into minutes from its reset; a
  minute counts once the device moved at least `MINUTE_BYTES` in it, so a phone's background
  keep-alives (a few hundred bytes a minute) do not use up its time, and a video call does. The
  counters are read every few seconds (`--stats-interval`), so each read's bytes fall in the
  minute it was read in.

A day runs from one reset (a wall-clock time the household picks, in its time zone) to the next,
so across a daylight-saving change it is 23 or 25 hours long. Usage starts again at zero at the
reset, and a bonus ("30 more minutes", "+500 MB") lasts until then.

The text form of an amount (ws.v1, the web UI): "120 min", "2 h", "500 MB", "5 GB", "1000000 B"
(SI units: 1 MB = 1,000,000 bytes).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .lifecycle import move_key
from .schedules import HouseholdTime, iso

MINUTE_BYTES = 4096  # less than this in a minute is background chatter, not time online
WARNING_SHARE = 0.8  # the household is warned at 80 % of the day's allowance
MAX_MINUTES = 24 * 60 * 2  # a day is at most 25 hours; bounds what one request may ask
MAX_BYTES = 10**15

UNITS = {"min": ("minutes", 1), "h": ("minutes", 60), "b": ("bytes", 1), "kb": ("bytes", 10**3)}
UNITS |= {"mb": ("bytes", 10**6), "gb": ("bytes", 10**9), "tb": ("bytes", 10**12)}


class BadAllowance(ValueError):
    pass


def parse_amount(text: str) -> tuple[str, int]:
    """ "2 h" -> ("minutes", 120), "500 MB" -> ("bytes", 500_000_000)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*", text)
    unit = match[2].lower() if match else ""
    unit = {"m": "min", "mins": "min", "minutes": "min", "hours": "h", "hour": "h"}.get(unit, unit)
    if not match or unit not in UNITS:
        raise BadAllowance(f"{text!r} is not an amount: say e.g. '120 min', '2 h', '500 MB', '5 GB'")
    kind, scale = UNITS[unit]
    amount = int(float(match[1]) * scale)
    if amount <= 0 or amount > (MAX_MINUTES if kind == "minutes" else MAX_BYTES):
        raise BadAllowance(f"{text!r} is out of range")
    return kind, amount


def amount_text(kind: str, amount: int) -> str:
    if kind == "minutes":
        return f"{amount} min"
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if amount >= scale and amount % (scale // 1000 or 1) == 0:
            return f"{amount / scale:g} {unit}"
    return f"{amount} B"


@dataclass(frozen=True)
class Allowance:
    kind: str  # "minutes" | "bytes"
    amount: int

    def text(self) -> str:
        return amount_text(self.kind, self.amount)


@dataclass
class DayUsage:
    """One device's use since the day began (day_start: the reset it began at)."""

    day_start: float
    bytes: int = 0
    minutes: int = 0  # minutes that counted
    bonus: int = 0  # in the allowance's kind, until the next reset
    _minute: int = -1  # the minute being filled (since day_start), and its bytes so far
    _minute_bytes: int = field(default=0)

    def add(self, nbytes: int, now: float) -> None:
        self.bytes += nbytes
        minute = int((now - self.day_start) // 60)
        if minute != self._minute:
            self._minute, self._minute_bytes = minute, 0
        before = self._minute_bytes
        self._minute_bytes += nbytes
        if before < MINUTE_BYTES <= self._minute_bytes:
            self.minutes += 1

    def used(self, kind: str) -> int:
        return self.minutes if kind == "minutes" else self.bytes


def standing(allowance: Allowance, usage: DayUsage) -> dict:
    """What the phone page shows: used of allowed (with the bonus), the 80 % warning, and whether it ran out."""
    allowed = allowance.amount + usage.bonus
    used = usage.used(allowance.kind)
    return {
        "kind": allowance.kind,
        "amount": allowance.amount,
        "text": allowance.text(),
        "bonus": usage.bonus,
        "allowed": allowed,
        "used": used,
        "warning": used >= WARNING_SHARE * allowed,
        "used_up": used >= allowed,
    }


class Allowances:
    """The concern: each device's allowance, its use today and its bonus (memory and disk), and which
    devices have used theirs up (a gate: `HomeRouter.gates`). Use is written to the disk on the tick
    after it changed, so a restart of the controller costs at most one tick's counting."""

    def __init__(self, store, clock: Callable[[], float], household: HouseholdTime):
        self.store, self.clock, self.household = store, clock, household
        self._allowances: dict[str, Allowance] = {}
        self._usage: dict[str, DayUsage] = {}
        self._used_up: set[str] = set()
        self._unsaved: set[str] = set()
        for mac, (kind, amount) in store.load_allowances().items():
            self._allowances[mac] = Allowance(kind, amount)
        for mac, (day_start, nbytes, minutes, bonus) in store.load_usage().items():
            self._usage[mac] = DayUsage(day_start, nbytes, minutes, bonus)
        self.tick(clock())

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self._allowances or mac in self._usage

    def forget(self, mac: str) -> None:
        self._allowances.pop(mac, None)
        self._usage.pop(mac, None)
        self._used_up.discard(mac)
        self._unsaved.discard(mac)

    def move(self, old_mac: str, new_mac: str) -> None:
        move_key(old_mac, new_mac, self._allowances, self._usage, self._used_up, self._unsaved)

    def may_forward(self, mac: str) -> bool:
        return mac not in self._used_up

    def hold_of(self, mac: str) -> tuple[str, float | None] | None:
        """("allowance", the next reset) while the device's allowance is used up."""
        return ("allowance", self.household.next_reset(self.clock())) if mac in self._used_up else None

    def status_of(self, mac: str) -> dict:
        allowance = self._allowances.get(mac)
        if allowance is None:
            return {"allowance": None}
        now = self.clock()
        return {
            "allowance": dict(
                standing(allowance, self._today(mac, now)),
                resets_at=iso(self.household.next_reset(now), self.household.tz),
            )
        }

    def tick(self, now: float) -> set[str]:
        """A new day (the household's reset): use starts again and bonuses end. Use is saved. The
        devices whose allowance ran out or came back."""
        for mac in list(self._usage):
            self._today(mac, now)
        for mac in self._unsaved:
            usage = self._usage.get(mac)
            if usage is not None:
                self.store.save_usage(mac, usage.day_start, usage.bytes, usage.minutes, usage.bonus)
        self._unsaved.clear()
        return self._recompute(set(self._allowances) | self._used_up, now)

    # -- events

    def count(self, used: dict[str, int]) -> set[str]:
        """Bytes each device moved since the last read (from the `Flows` rows): the devices whose
        allowance ran out with them."""
        now = self.clock()
        for mac, nbytes in used.items():
            if nbytes > 0 and mac in self._allowances:
                self._today(mac, now).add(nbytes, now)
                self._unsaved.add(mac)
        return self._recompute(set(used) & set(self._allowances), now)

    # -- the household's decisions

    def choose(self, mac: str, allowance: Allowance | None) -> None:
        if allowance is None:
            self._allowances.pop(mac, None)
        else:
            self._allowances[mac] = allowance
        self.store.save_allowance(mac, allowance.kind if allowance else None, allowance.amount if allowance else 0)
        self._recompute({mac}, self.clock())

    def grant_bonus(self, mac: str, kind: str, amount: int) -> None:
        """More for today ("30 more minutes", "+500 MB"), until the next reset."""
        allowance = self._allowances.get(mac)
        if allowance is None:
            raise BadAllowance("this device has no allowance to add to")
        if kind != allowance.kind:
            raise BadAllowance(f"its allowance is in {allowance.kind}: the bonus must be too")
        now = self.clock()
        usage = self._today(mac, now)
        usage.bonus = min(usage.bonus + amount, MAX_BYTES if kind == "bytes" else MAX_MINUTES)
        self.store.save_usage(mac, usage.day_start, usage.bytes, usage.minutes, usage.bonus)
        self._recompute({mac}, now)

    # -- internals

    def _today(self, mac: str, now: float) -> DayUsage:
        """The device's use today: started afresh at the household's reset."""
        day_start = self.household.day_start(now)
        usage = self._usage.get(mac)
        if usage is None or usage.day_start < day_start:
            usage = self._usage[mac] = DayUsage(day_start)
            self._unsaved.add(mac)
        return usage

    def _recompute(self, macs: set[str], now: float) -> set[str]:
        changed = set()
        for mac in macs:
            allowance = self._allowances.get(mac)
            used_up = allowance is not None and standing(allowance, self._today(mac, now))["used_up"]
            if used_up != (mac in self._used_up):
                (self._used_up.add if used_up else self._used_up.discard)(mac)
                changed.add(mac)
        return changed
