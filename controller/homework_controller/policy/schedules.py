"""Weekly schedules ("school nights Sun-Thu 21:30-07:00") and the household's clock, pure.

A schedule is a list of windows; a window starts on each of its days at a local wall-clock time
and ends at another, the next day if the end is not after the start (21:30-07:00 crosses
midnight). Times are the household's, in its IANA time zone (`zoneinfo`), and a boundary is the
first instant at which the household's clocks show that time or later:

- on the spring-forward night a time the clocks skip (02:30 when 02:00 jumps to 03:00) is the jump
  itself: "until 02:30" ends when the clocks show 03:00;
- on the fall-back night a time the clocks show twice (02:30 when 03:00 goes back to 02:00) is its
  first showing.

So a window lasts its nominal length plus or minus the hour the clocks moved inside it, and every
window of every night is either running or not, never both or neither.

The text form (ws.v1, the web UI): windows separated by ";", each "DAYS HH:MM-HH:MM", DAYS a
comma-separated list of days or ranges ("sun-thu", "sat,sun", "daily"), e.g.
"sun-thu 21:30-07:00; fri,sat 23:00-08:00".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # index = date.weekday()
MAX_WINDOWS = 14  # two a day is more than any household needs; a bound on what one request may ask


class BadSchedule(ValueError):
    pass


def zone(name: str) -> ZoneInfo:
    """The household's time zone by its IANA name ("Europe/London"); BadSchedule if there is none."""
    if not re.fullmatch(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*", name or ""):
        raise BadSchedule(f"{name!r} is not a time zone name (e.g. Europe/London)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadSchedule(f"no time zone {name!r} (e.g. Europe/London)") from None


def clock_time(text: str) -> time:
    """ "21:30" -> 21:30; BadSchedule otherwise."""
    match = re.fullmatch(r"\s*([01]?\d|2[0-3]):([0-5]\d)\s*", text)
    if not match:
        raise BadSchedule(f"{text!r} is not a time of day (HH:MM, 00:00-23:59)")
    return time(int(match[1]), int(match[2]))


def local_instant(day: date, at: time, tz: ZoneInfo) -> float:
    """The first instant (epoch seconds) at which the clocks in tz show `at` or later on `day`."""
    wall = datetime.combine(day, at)
    first = wall.replace(tzinfo=tz, fold=0).timestamp()  # the first showing of an ambiguous time
    if _wall(first, tz) == wall:
        return first
    # The clocks skip `at` on this day: fold=0 and fold=1 read it with the offsets either side of the
    # jump, and the jump lies between the two. Find it (whole seconds; zones move on whole seconds).
    low, high = sorted((wall.replace(tzinfo=tz, fold=1).timestamp(), first))
    low_s, high_s = int(low), int(high) + 1
    while low_s < high_s:
        mid = (low_s + high_s) // 2
        if _wall(mid, tz) >= wall:
            high_s = mid
        else:
            low_s = mid + 1
    return float(low_s)


def _wall(instant: float, tz: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(instant, tz).replace(tzinfo=None, fold=0)


def local_date(instant: float, tz: ZoneInfo) -> date:
    return datetime.fromtimestamp(instant, tz).date()


def iso(instant: float, tz: ZoneInfo) -> str:
    """An instant as the household reads it, with its offset ("2026-03-29T07:00:00+02:00")."""
    return datetime.fromtimestamp(instant, UTC).astimezone(tz).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Window:
    days: frozenset[int]  # the days it starts on (0 = Monday)
    start: time
    end: time  # the next day's if not after start

    def text(self) -> str:
        return f"{_days_text(self.days)} {self.start:%H:%M}-{self.end:%H:%M}"

    def instants(self, day: date, tz: ZoneInfo) -> tuple[float, float]:
        """When the window that starts on `day` starts and ends (epoch seconds)."""
        end_day = day + timedelta(days=1) if self.end <= self.start else day
        return local_instant(day, self.start, tz), local_instant(end_day, self.end, tz)


def parse(text: str) -> tuple[Window, ...]:
    """The text form (module docstring) -> windows; "" is no schedule. BadSchedule says what is wrong."""
    windows = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        match = re.fullmatch(r"([a-z,\- ]+?)\s+(\S+)\s*-\s*(\S+)", part.lower())
        if not match:
            raise BadSchedule(f"{part!r}: a window is DAYS HH:MM-HH:MM, e.g. 'sun-thu 21:30-07:00'")
        start, end = clock_time(match[2]), clock_time(match[3])
        if start == end:
            raise BadSchedule(f"{part!r}: a window must not start and end at the same time")
        windows.append(Window(_parse_days(match[1]), start, end))
    if len(windows) > MAX_WINDOWS:
        raise BadSchedule(f"at most {MAX_WINDOWS} windows in a schedule")
    return tuple(windows)


def text(windows: tuple[Window, ...]) -> str:
    return "; ".join(w.text() for w in windows)


def _parse_days(text: str) -> frozenset[int]:
    days: set[int] = set()
    for item in (i.strip() for i in text.replace(" ", ",").split(",")):
        if not item:
            continue
        if item in ("daily", "every day", "all"):
            days.update(range(7))
            continue
        first, _, last = item.partition("-")
        if first[:3] not in DAY_NAMES or (last and last[:3] not in DAY_NAMES):
            raise BadSchedule(f"{item!r} is not a day or range of days (mon..sun, e.g. 'sun-thu')")
        a, b = DAY_NAMES.index(first[:3]), DAY_NAMES.index((last or first)[:3])
        days.update((a + i) % 7 for i in range((b - a) % 7 + 1))  # sun-thu wraps round the week
    if not days:
        raise BadSchedule("a window needs at least one day")
    return frozenset(days)


def _days_text(days: frozenset[int]) -> str:
    if len(days) == 7:
        return "daily"
    return ",".join(DAY_NAMES[d] for d in sorted(days))


def running(windows: tuple[Window, ...], now: float, tz: ZoneInfo) -> float | None:
    """If a window is running at `now`, when the schedule lets go (windows that meet or overlap run
    on as one); None if none is."""
    until = None
    at = now
    for _ in range(len(windows) * 3 + 1):  # each step lengthens the hold by one window's run; bounded
        end = _running_window_end(windows, at, tz)
        if end is None or (until is not None and end <= until):
            break
        until = end
        at = end
    return until


def _running_window_end(windows: tuple[Window, ...], at: float, tz: ZoneInfo) -> float | None:
    """The latest end among the windows running at `at` (a window started today or yesterday)."""
    today = local_date(at, tz)
    latest = None
    for day in (today - timedelta(days=1), today):
        for window in windows:
            if day.weekday() not in window.days:
                continue
            start, end = window.instants(day, tz)
            if start <= at < end and (latest is None or end > latest):
                latest = end
    return latest


def next_start(windows: tuple[Window, ...], now: float, tz: ZoneInfo) -> float | None:
    """When a window next starts after `now` (None: no windows). Weekly, so within eight days."""
    today = local_date(now, tz)
    soonest = None
    for offset in range(8):
        day = today + timedelta(days=offset)
        for window in windows:
            if day.weekday() in window.days:
                start = local_instant(day, window.start, tz)
                if start > now and (soonest is None or start < soonest):
                    soonest = start
        if soonest is not None:
            return soonest  # a later day's windows start later still
    return soonest


def next_boundary(at: time, now: float, tz: ZoneInfo) -> float:
    """The next time after `now` the clocks show `at` (the household's daily reset)."""
    today = local_date(now, tz)
    for day in (today - timedelta(days=1), today, today + timedelta(days=1), today + timedelta(days=2)):
        instant = local_instant(day, at, tz)
        if instant > now:
            return instant
    raise AssertionError("a day always has its reset")


def last_boundary(at: time, now: float, tz: ZoneInfo) -> float:
    """The last time at or before `now` the clocks showed `at`: when today's allowance began."""
    today = local_date(now, tz)
    for day in (today + timedelta(days=1), today, today - timedelta(days=1), today - timedelta(days=2)):
        instant = local_instant(day, at, tz)
        if instant <= now:
            return instant
    raise AssertionError("a day always has its reset")


class HouseholdTime:
    """The household's settings for time: its zone (IANA name) and when its day begins (the reset of
    allowances, and what "until tomorrow" means). Kept in the controller's SQLite file."""

    DEFAULT_ZONE, DEFAULT_RESET = "UTC", "04:00"

    def __init__(self, store):
        self.store = store
        self.version = 0  # counts changes, so those who keep times worked out in the old zone know
        self._day: tuple[float, float] = (0.0, 0.0)  # the household's day now: (its reset, the next)
        saved = store.load_settings()
        try:
            self.tz, self.zone_name = zone(saved.get("time_zone", self.DEFAULT_ZONE)), saved.get("time_zone", "UTC")
            self.reset = clock_time(saved.get("reset_time", self.DEFAULT_RESET))
        except BadSchedule:  # a zone this system no longer has: the defaults until the household sets it again
            self.tz, self.zone_name = zone(self.DEFAULT_ZONE), self.DEFAULT_ZONE
            self.reset = clock_time(self.DEFAULT_RESET)

    def set_zone(self, name: str) -> None:
        self.tz, self.zone_name = zone(name), name
        self.store.save_setting("time_zone", name)
        self._changed()

    def set_reset(self, text: str) -> None:
        self.reset = clock_time(text)
        self.store.save_setting("reset_time", f"{self.reset:%H:%M}")
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        self._day = (0.0, 0.0)

    def day(self, now: float) -> tuple[float, float]:
        """The household's day at `now`: when it began (the last reset) and when it ends (the next).
        Worked out once a day: asked for every device at every stats poll and tick."""
        began, ends = self._day
        if not began <= now < ends:
            began = last_boundary(self.reset, now, self.tz)
            self._day = began, next_boundary(self.reset, now, self.tz)
        return self._day

    def next_reset(self, now: float) -> float:
        return self.day(now)[1]

    def day_start(self, now: float) -> float:
        return self.day(now)[0]

    def to_json(self) -> dict:
        return {"time_zone": self.zone_name, "reset_time": f"{self.reset:%H:%M}"}
