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

from ..lifecycle import move_key
from ..policy.schedules import HouseholdTime, iso

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


# A shared allowance's name: what the web UI calls the pot (e.g. "person-3"); no colon, so never a MAC.
SHARED_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}")
MAX_SHARED = 64  # shared allowances, and devices sharing one: a household's people and their devices
MAX_SHARING = 64


class Allowances:
    """The concern: each device's allowance, its use today and its bonus (memory and disk), and which
    devices have used theirs up (a gate: `HomeRouter.gates`). Use is written to the disk on the tick
    after it changed, so a restart of the controller costs at most one tick's counting.

    A **shared allowance** is one allowance that several devices use together (a person's: all the
    devices an account owns; the web UI knows who owns what and names the devices). What any of them
    moves counts against it, and when it runs out all of them are held. A device may also keep an
    allowance of its own; whichever runs out first holds it. Allowances and use are kept per
    *holder*: a device's MAC, or a shared allowance's name."""

    def __init__(self, store, clock: Callable[[], float], household: HouseholdTime):
        self.store, self.clock, self.household = store, clock, household
        self._allowances: dict[str, Allowance] = {}  # holder -> its allowance
        self._usage: dict[str, DayUsage] = {}  # holder -> its use today
        self._used_up: set[str] = set()  # holders
        self._unsaved: set[str] = set()  # holders
        self._shared: dict[str, set[str]] = {}  # a shared allowance's name -> the devices sharing it
        self._sharing: dict[str, str] = {}  # a device's MAC -> the shared allowance it counts against
        for shared in (False, True):
            for holder, (kind, amount) in store.load_allowances(shared).items():
                self._allowances[holder] = Allowance(kind, amount)
                if shared:
                    self._shared[holder] = set()
            for holder, (day_start, nbytes, minutes, bonus) in store.load_usage(shared).items():
                self._usage[holder] = DayUsage(day_start, nbytes, minutes, bonus)
        for mac, name in store.load_allowance_sharing().items():
            if name in self._shared:
                self._shared[name].add(mac)
                self._sharing[mac] = name
        self.tick(clock())

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self._allowances or mac in self._usage or mac in self._sharing

    def forget(self, mac: str) -> None:
        self._allowances.pop(mac, None)
        self._usage.pop(mac, None)
        self._used_up.discard(mac)
        self._unsaved.discard(mac)
        name = self._sharing.pop(mac, None)
        if name is not None:
            self._shared[name].discard(mac)

    def move(self, old_mac: str, new_mac: str) -> None:
        move_key(old_mac, new_mac, self._allowances, self._usage, self._used_up, self._unsaved, self._sharing)
        name = self._sharing.get(new_mac)
        if name is not None:
            move_key(old_mac, new_mac, self._shared[name])

    def may_forward(self, mac: str) -> bool:
        return mac not in self._used_up and self._sharing.get(mac) not in self._used_up

    def hold_of(self, mac: str) -> tuple[str, float | None] | None:
        """("allowance", the next reset) while the device's allowance, or the one it shares, is used up."""
        if self.may_forward(mac):
            return None
        return ("allowance", self.household.next_reset(self.clock()))

    def status_of(self, mac: str) -> dict:
        name = self._sharing.get(mac)
        return {
            "allowance": self._standing(mac),
            "shared_allowance": None if name is None else self.shared_status(name),
        }

    def tick(self, now: float) -> set[str]:
        """A new day (the household's reset): use starts again and bonuses end. Use is saved. The
        devices whose allowance ran out or came back."""
        for holder in list(self._usage):
            self._today(holder, now)
        for holder in self._unsaved:
            usage = self._usage.get(holder)
            if usage is not None:
                shared = holder in self._shared
                self.store.save_usage(holder, usage.day_start, usage.bytes, usage.minutes, usage.bonus, shared)
        self._unsaved.clear()
        return self._recompute(set(self._allowances) | self._used_up, now)

    # -- events

    def count(self, used: dict[str, int]) -> set[str]:
        """Bytes each device moved since the last read (from the `Flows` rows): the devices whose
        allowance (or the one they share) ran out with them. A shared allowance counts what all its
        devices moved in this read together, so their minutes online are counted once."""
        now = self.clock()
        per_holder: dict[str, int] = {}
        for mac, nbytes in used.items():
            if nbytes <= 0:
                continue
            for holder in (mac, self._sharing.get(mac)):
                if holder in self._allowances:
                    per_holder[holder] = per_holder.get(holder, 0) + nbytes
        for holder, nbytes in per_holder.items():
            self._today(holder, now).add(nbytes, now)
            self._unsaved.add(holder)
        return self._recompute(set(per_holder), now)

    # -- the household's decisions

    def choose(self, mac: str, allowance: Allowance | None) -> set[str]:
        """The device's own allowance (None removes it): the devices whose hold changed."""
        return self._choose(mac, allowance, shared=False)

    def choose_shared(self, name: str, allowance: Allowance | None) -> set[str]:
        """A shared allowance (None removes it, and every device stops sharing it): the devices whose
        hold changed."""
        if name not in self._shared and allowance is not None and len(self._shared) >= MAX_SHARED:
            raise BadAllowance(f"at most {MAX_SHARED} shared allowances")
        if allowance is None:
            members = set(self._shared.get(name, ()))
            if members:
                self.share(name, [])
            self._used_up.discard(name)
            self._choose(name, None, shared=True)
            self._shared.pop(name, None)
            return members
        self._shared.setdefault(name, set())
        return self._choose(name, allowance, shared=True)

    def share(self, name: str, macs: list[str]) -> set[str]:
        """The devices that share the allowance from now on (replacing those that did; a device
        sharing another one moves to this one): the devices whose hold changed."""
        members = self._shared.get(name)
        if members is None:
            raise BadAllowance(f"no shared allowance {name!r}: set its amount first")
        if len(set(macs)) > MAX_SHARING:
            raise BadAllowance(f"at most {MAX_SHARING} devices share one allowance")
        for mac in members - set(macs):
            del self._sharing[mac]
            self.store.save_sharing(mac, None)
        for mac in set(macs) - members:
            earlier = self._sharing.get(mac)
            if earlier is not None:
                self._shared[earlier].discard(mac)
            self._sharing[mac] = name
            self.store.save_sharing(mac, name)
        self._shared[name] = set(macs)
        return members ^ set(macs)

    def grant_bonus(self, holder: str, kind: str, amount: int) -> set[str]:
        """More for today ("30 more minutes", "+500 MB") for a device or a shared allowance, until the
        next reset: the devices whose hold changed."""
        allowance = self._allowances.get(holder)
        if allowance is None:
            raise BadAllowance("there is no allowance to add to")
        if kind != allowance.kind:
            raise BadAllowance(f"its allowance is in {allowance.kind}: the bonus must be too")
        now = self.clock()
        usage = self._today(holder, now)
        usage.bonus = min(usage.bonus + amount, MAX_BYTES if kind == "bytes" else MAX_MINUTES)
        shared = holder in self._shared
        self.store.save_usage(holder, usage.day_start, usage.bytes, usage.minutes, usage.bonus, shared)
        return self._recompute({holder}, now)

    # -- what the household sees

    def shared_status(self, name: str) -> dict | None:
        """A shared allowance's standing today and the devices sharing it (None: there is none)."""
        standing = self._standing(name)
        if standing is None:
            return None
        return dict(standing, name=name, devices=sorted(self._shared.get(name, ())))

    def shared_names(self) -> list[str]:
        return sorted(self._shared)

    # -- internals

    def _standing(self, holder: str) -> dict | None:
        allowance = self._allowances.get(holder)
        if allowance is None:
            return None
        now = self.clock()
        return dict(
            standing(allowance, self._today(holder, now)),
            resets_at=iso(self.household.next_reset(now), self.household.tz),
        )

    def _choose(self, holder: str, allowance: Allowance | None, shared: bool) -> set[str]:
        if allowance is None:
            self._allowances.pop(holder, None)
            self._usage.pop(holder, None)
        else:
            self._allowances[holder] = allowance
        self.store.save_allowance(
            holder, allowance.kind if allowance else None, allowance.amount if allowance else 0, shared
        )
        return self._recompute({holder}, self.clock())

    def _today(self, holder: str, now: float) -> DayUsage:
        """The holder's use today: started afresh at the household's reset."""
        day_start = self.household.day_start(now)
        usage = self._usage.get(holder)
        if usage is None or usage.day_start < day_start:
            usage = self._usage[holder] = DayUsage(day_start)
            self._unsaved.add(holder)
        return usage

    def _recompute(self, holders: set[str], now: float) -> set[str]:
        """Whether each holder's allowance is used up now: the devices whose hold changed with it."""
        changed = set()
        for holder in holders:
            allowance = self._allowances.get(holder)
            used_up = allowance is not None and standing(allowance, self._today(holder, now))["used_up"]
            if used_up != (holder in self._used_up):
                (self._used_up.add if used_up else self._used_up.discard)(holder)
                changed |= set(self._shared[holder]) if holder in self._shared else {holder}
        return changed
