"""The schedule arithmetic: windows crossing midnight, the nights the clocks change, a change of zone."""

from datetime import UTC, date, datetime

import pytest

from homework_controller.policy import schedules
from homework_controller.policy.schedules import BadSchedule

BERLIN = schedules.zone("Europe/Berlin")  # 2026: clocks go 02:00 -> 03:00 on 29 March, 03:00 -> 02:00 on 25 October
LONDON = schedules.zone("Europe/London")


def utc(*args) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


def local(tz, *args) -> float:
    return datetime(*args, tzinfo=tz).timestamp()


def test_school_nights_cross_midnight_and_end_in_the_morning():
    school_nights = schedules.parse("sun-thu 21:30-07:00")
    # Sunday 1 June 2026 is a school night; Friday and Saturday nights are not.
    assert schedules.running(school_nights, local(LONDON, 2026, 5, 31, 21, 29), LONDON) is None
    until = schedules.running(school_nights, local(LONDON, 2026, 5, 31, 21, 30), LONDON)
    assert until == local(LONDON, 2026, 6, 1, 7, 0)
    assert schedules.running(school_nights, local(LONDON, 2026, 6, 1, 0, 15), LONDON) == until  # after midnight
    assert schedules.running(school_nights, local(LONDON, 2026, 6, 1, 6, 59), LONDON) == until
    assert schedules.running(school_nights, local(LONDON, 2026, 6, 1, 7, 0), LONDON) is None
    # Thursday night runs into Friday morning; Friday night is free, and so is Saturday morning.
    assert schedules.running(school_nights, local(LONDON, 2026, 6, 5, 6, 0), LONDON) == local(LONDON, 2026, 6, 5, 7, 0)
    assert schedules.running(school_nights, local(LONDON, 2026, 6, 5, 22, 0), LONDON) is None
    assert schedules.running(school_nights, local(LONDON, 2026, 6, 6, 6, 0), LONDON) is None


def test_windows_that_meet_hold_as_one():
    windows = schedules.parse("mon 21:00-23:00; mon 23:00-01:00")
    assert schedules.running(windows, local(LONDON, 2026, 6, 1, 22, 0), LONDON) == local(LONDON, 2026, 6, 2, 1, 0)


def test_spring_forward_a_window_ending_in_the_skipped_hour_ends_at_the_jump():
    # Saturday 28 March 2026, 21:30-02:30; at 02:00 on Sunday the clocks show 03:00 (01:00 UTC).
    night = schedules.parse("sat 21:30-02:30")
    start = local(BERLIN, 2026, 3, 28, 21, 30)
    assert start == utc(2026, 3, 28, 20, 30)
    assert schedules.running(night, start - 1, BERLIN) is None
    jump = utc(2026, 3, 29, 1, 0)
    assert schedules.running(night, start, BERLIN) == jump
    assert schedules.running(night, jump - 1, BERLIN) == jump  # 01:59:59 CET: still bedtime
    assert schedules.running(night, jump, BERLIN) is None  # the clocks show 03:00, past 02:30
    assert schedules.iso(jump, BERLIN) == "2026-03-29T03:00:00+02:00"


def test_spring_forward_a_window_starting_in_the_skipped_hour_starts_at_the_jump():
    early = schedules.parse("sun 02:15-06:00")
    jump = utc(2026, 3, 29, 1, 0)
    assert schedules.running(early, jump - 1, BERLIN) is None
    assert schedules.running(early, jump, BERLIN) == local(BERLIN, 2026, 3, 29, 6, 0) == utc(2026, 3, 29, 4, 0)


def test_fall_back_a_time_shown_twice_is_its_first_showing():
    # Saturday 24 October 2026: at 03:00 CEST (01:00 UTC) the clocks go back to 02:00.
    night = schedules.parse("sat 21:30-02:30")
    first_0230 = utc(2026, 10, 25, 0, 30)  # 02:30 CEST
    assert schedules.running(night, local(BERLIN, 2026, 10, 24, 21, 30), BERLIN) == first_0230
    assert schedules.running(night, first_0230, BERLIN) is None
    assert schedules.running(night, utc(2026, 10, 25, 1, 30), BERLIN) is None  # 02:30 CET, the second showing
    # A window over the repeated hour lasts it twice: 02:00 CEST to 03:00 CET is two hours.
    repeated = schedules.parse("sun 02:00-03:00")
    assert schedules.running(repeated, utc(2026, 10, 25, 0, 0), BERLIN) == utc(2026, 10, 25, 2, 0)
    assert schedules.running(repeated, utc(2026, 10, 25, 1, 30), BERLIN) == utc(2026, 10, 25, 2, 0)


def test_the_same_instant_in_another_zone_is_another_time_of_day():
    nightly = schedules.parse("daily 21:30-07:00")
    instant = utc(2026, 6, 1, 21, 0)  # 22:00 in London, 06:00 the next day in Tokyo, 17:00 in New York
    assert schedules.running(nightly, instant, LONDON) == utc(2026, 6, 2, 6, 0)
    assert schedules.running(nightly, instant, schedules.zone("Asia/Tokyo")) == utc(2026, 6, 1, 22, 0)
    assert schedules.running(nightly, instant, schedules.zone("America/New_York")) is None


def test_the_household_day_is_shorter_or_longer_on_the_nights_the_clocks_change():
    reset = schedules.clock_time("02:30")
    saturday_noon = local(BERLIN, 2026, 3, 28, 12, 0)
    began = schedules.last_boundary(reset, saturday_noon, BERLIN)
    ends = schedules.next_boundary(reset, saturday_noon, BERLIN)
    assert began == local(BERLIN, 2026, 3, 28, 2, 30) and ends == utc(2026, 3, 29, 1, 0)  # at the jump
    assert ends - began == 23.5 * 3600  # 02:30 CET to the jump (03:00 CEST)
    autumn = schedules.clock_time("04:00")
    ends = schedules.next_boundary(autumn, local(BERLIN, 2026, 10, 24, 12, 0), BERLIN)
    assert ends - schedules.last_boundary(autumn, local(BERLIN, 2026, 10, 24, 12, 0), BERLIN) == 25 * 3600
    # At the very instant of the reset, the new day has begun.
    assert schedules.last_boundary(autumn, ends, BERLIN) == ends


def test_the_text_form_reads_ranges_round_the_week_and_says_what_is_wrong():
    [window] = schedules.parse("Sun-Thu 21:30-07:00")
    assert window.days == frozenset({6, 0, 1, 2, 3})
    assert schedules.text(schedules.parse("fri,sat 23:00-8:00; daily 13:00-14:00")) == (
        "fri,sat 23:00-08:00; daily 13:00-14:00"
    )
    assert schedules.parse("") == ()
    for bad, says in (
        ("funday 21:00-07:00", "not a day"),
        ("sun 25:00-07:00", "not a time of day"),
        ("sun 21:00-21:00", "same time"),
        ("21:00-07:00", "DAYS HH:MM-HH:MM"),
        ("; ".join(["mon 01:00-02:00"] * 15), "at most"),
    ):
        with pytest.raises(BadSchedule, match=says):
            schedules.parse(bad)


def test_a_time_zone_is_an_iana_name():
    assert schedules.zone("America/Argentina/Buenos_Aires").key == "America/Argentina/Buenos_Aires"
    for bad in ("Mars/Olympus", "../../etc/passwd", "", "Europe/London\n"):
        with pytest.raises(BadSchedule):
            schedules.zone(bad)


def test_local_instant_is_the_wall_time_on_an_ordinary_day():
    assert schedules.local_instant(date(2026, 6, 1), schedules.clock_time("07:00"), LONDON) == utc(2026, 6, 1, 6, 0)


def test_the_next_bedtime_starts_on_its_next_day_even_across_a_free_weekend_and_a_clock_change():
    school_nights = schedules.parse("sun-thu 21:30-07:00")
    assert schedules.next_start(school_nights, local(LONDON, 2026, 6, 1, 12, 0), LONDON) == local(
        LONDON, 2026, 6, 1, 21, 30
    )
    friday_noon = local(LONDON, 2026, 6, 5, 12, 0)
    assert schedules.next_start(school_nights, friday_noon, LONDON) == local(LONDON, 2026, 6, 7, 21, 30)  # Sunday
    early = schedules.parse("sun 02:15-06:00")  # on 29 March the clocks skip 02:15: it starts at the jump
    assert schedules.next_start(early, utc(2026, 3, 28, 12, 0), BERLIN) == utc(2026, 3, 29, 1, 0)
    assert schedules.next_start((), friday_noon, LONDON) is None
