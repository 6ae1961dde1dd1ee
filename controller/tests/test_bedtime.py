"""Pause for a while, bedtimes and daily allowances, through the router core and a simulated switch:
what the household sees on the status and where the device's packets go, on a test clock."""

from datetime import UTC, datetime

import pytest
from fakeoftable import FakeSwitch, ipv4
from support import LAPTOP, PHONE, ROUTER_MAC, TABLET, WLAN, join
from test_dns_gating import ask

from homework_controller import flows
from homework_controller.api import authority, operations
from homework_controller.core.router import HomeRouter
from homework_controller.effects import TellHousehold
from homework_controller.errors import ApiError
from homework_controller.policy import dhcp, schedules
from homework_controller.store import DeviceStore

INTERNET = "198.51.100.80"
BERLIN = schedules.zone("Europe/Berlin")
MB = 1_000_000


def utc(*args) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


def at(clock, router, switch, instant):
    """The clock moves on to `instant` and the router's tick runs, as the controller's does every 2 s."""
    clock.now = instant
    switch.apply(router.tick())


@pytest.fixture
def router(db_path, clock):
    """Leases of a month: these tests move the clock by hours and days, and a device would renew its lease."""
    return HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 30 * 86400), clock=clock)


@pytest.fixture
def home(router, switch, clock):
    """A phone and a laptop, permitted, on a Monday afternoon in Berlin (1 June 2026, 14:00)."""
    clock.now = utc(2026, 6, 1, 12, 0)
    router.controls.set_time_zone("Europe/Berlin")
    phone, laptop = join(router, switch, PHONE), join(router, switch, LAPTOP)
    return phone, laptop


def online(switch, mac, ip):
    out = ipv4(WLAN, mac, ROUTER_MAC, ip, INTERNET, flows.PROTO_TCP, 40000, 443)
    back = ipv4(flows.LOCAL, ROUTER_MAC, mac, INTERNET, ip, flows.PROTO_TCP, 443, 40000)
    there = [d for d in switch.send(out) if d.port != flows.CONTROLLER]
    return bool(there) and bool([d for d in switch.send(back) if d.port != flows.CONTROLLER])


def moved(router, ip, nbytes, packets=None):
    """The stats poll finds the device's own rule has counted nbytes so far (cumulative, as OVS counts)."""
    packets = nbytes // 100 + 1 if packets is None else packets
    return router.on_flow_stats(
        [(flows.AccountingPriority.DEVICE_SOURCE, {"eth_type": 0x0800, "ipv4_src": ip}, packets, nbytes)]
    )


# ---- pause for a while


def test_pause_for_30_minutes_ends_by_itself_and_the_status_says_until_when(router, switch, clock, home):
    phone, laptop = home
    switch.apply(router.decisions.pause_for(PHONE, "30"))
    status = router.status(PHONE)
    assert status["paused"] and status["paused_why"] == "paused"
    assert status["paused_until"] == "2026-06-01T14:30:00+02:00"
    assert not online(switch, PHONE, phone) and online(switch, LAPTOP, laptop)  # the laptop is not paused
    at(clock, router, switch, utc(2026, 6, 1, 12, 29, 59))
    assert not online(switch, PHONE, phone)
    at(clock, router, switch, utc(2026, 6, 1, 12, 30))
    assert online(switch, PHONE, phone)
    assert router.status(PHONE) | {"paused": False, "paused_why": None, "paused_until": None} == router.status(PHONE)


def test_pause_until_tomorrow_is_the_households_reset_and_until_resumed_has_no_end(router, switch, clock, home):
    router.controls.set_reset_time("05:00")
    switch.apply(router.decisions.pause_for(PHONE, "tomorrow"))
    assert router.status(PHONE)["paused_until"] == "2026-06-02T05:00:00+02:00"
    switch.apply(router.decisions.pause_for(PHONE, "1 h"))
    assert router.status(PHONE)["paused_until"] == "2026-06-01T15:00:00+02:00"
    switch.apply(router.decisions.pause(PHONE))
    assert router.status(PHONE)["paused_until"] is None and router.status(PHONE)["paused_why"] == "paused"
    switch.apply(router.decisions.resume(PHONE))
    assert not router.status(PHONE)["paused"]


def test_a_bad_duration_is_refused_and_changes_nothing(router, switch, home):
    for bad in ("forever", "500 MB", "-5", "", "99999999"):
        with pytest.raises(ApiError):
            router.decisions.pause_for(PHONE, bad)
    assert not router.status(PHONE)["paused"]


def test_a_paused_devices_dns_is_refused(router, switch, home):
    phone, laptop = home
    switch.apply(router.decisions.pause(PHONE))
    assert ask(router, phone, "example.com") == "block"
    assert ask(router, laptop, "example.com") == "allow"  # positive control
    switch.apply(router.decisions.resume(PHONE))
    assert ask(router, phone, "example.com") == "allow"


# ---- bedtime


def test_a_bedtime_pauses_the_device_at_its_minute_and_lets_it_go_at_the_end(router, switch, clock, home):
    phone, laptop = home
    switch.apply(router.decisions.set_schedule(PHONE, "sun-thu 21:30-07:00"))
    assert router.status(PHONE)["schedule"] == "mon,tue,wed,thu,sun 21:30-07:00"
    at(clock, router, switch, utc(2026, 6, 1, 19, 29, 58))  # 21:29:58 in Berlin
    assert online(switch, PHONE, phone)
    at(clock, router, switch, utc(2026, 6, 1, 19, 30))
    assert not online(switch, PHONE, phone) and online(switch, LAPTOP, laptop)
    status = router.status(PHONE)
    assert (status["paused_why"], status["paused_until"]) == ("bedtime", "2026-06-02T07:00:00+02:00")
    at(clock, router, switch, utc(2026, 6, 2, 5, 0))  # 07:00
    assert online(switch, PHONE, phone) and not router.status(PHONE)["paused"]


def test_resumed_at_bedtime_it_stays_online_tonight_and_is_paused_again_tomorrow_night(router, switch, clock, home):
    phone, _ = home
    switch.apply(router.decisions.set_schedule(PHONE, "daily 21:30-07:00"))
    at(clock, router, switch, utc(2026, 6, 1, 20, 0))
    assert not online(switch, PHONE, phone)
    switch.apply(router.decisions.resume(PHONE))
    at(clock, router, switch, utc(2026, 6, 1, 23, 0))
    assert online(switch, PHONE, phone)
    at(clock, router, switch, utc(2026, 6, 2, 19, 30))
    assert not online(switch, PHONE, phone)


def test_changing_the_time_zone_moves_bedtime_at_the_next_tick(router, switch, clock, home):
    phone, _ = home
    switch.apply(router.decisions.set_schedule(PHONE, "daily 21:30-07:00"))
    at(clock, router, switch, utc(2026, 6, 1, 20, 0))  # 22:00 in Berlin
    assert not online(switch, PHONE, phone)
    router.controls.set_time_zone("America/New_York")  # 16:00 there
    at(clock, router, switch, clock.now + 2)
    assert online(switch, PHONE, phone)
    with pytest.raises(ApiError, match="time zone"):
        router.controls.set_time_zone("Atlantis/Capital")
    assert router.controls.household_time() == {"time_zone": "America/New_York", "reset_time": "04:00"}


def test_a_bad_schedule_is_refused_and_the_old_one_stays(router, switch, home):
    switch.apply(router.decisions.set_schedule(PHONE, "sun-thu 21:30-07:00"))
    with pytest.raises(ApiError, match="not a time of day"):
        router.decisions.set_schedule(PHONE, "sun-thu 21:30-7")
    assert router.status(PHONE)["schedule"] == "mon,tue,wed,thu,sun 21:30-07:00"


def test_pauses_schedules_and_allowances_survive_a_restart(router, switch, clock, home, db_path):
    switch.apply(router.decisions.pause_for(PHONE, "30"))
    switch.apply(router.decisions.set_schedule(LAPTOP, "daily 21:30-07:00"))
    switch.apply(router.decisions.set_allowance(LAPTOP, "1 MB"))
    moved(router, home[1], 700_000)
    router.tick()  # today's use is written on the tick
    router.store.flush()
    again = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    assert again.status(PHONE)["paused_until"] == "2026-06-01T14:30:00+02:00"
    assert again.status(LAPTOP)["schedule"] == "daily 21:30-07:00"
    assert again.status(LAPTOP)["allowance"]["used"] == 700_000
    assert again.controls.household_time()["time_zone"] == "Europe/Berlin"


# ---- allowances


def test_a_data_allowance_warns_at_80_percent_pauses_at_100_and_a_bonus_lets_it_go_on(router, switch, clock, home):
    phone, laptop = home
    switch.apply(router.decisions.set_allowance(PHONE, "1 MB"))
    switch.apply(moved(router, phone, 700_000))
    allowance = router.status(PHONE)["allowance"]
    assert (allowance["used"], allowance["allowed"], allowance["warning"]) == (700_000, MB, False)
    switch.apply(moved(router, phone, 800_000))
    assert router.status(PHONE)["allowance"]["warning"] and online(switch, PHONE, phone)
    over = moved(router, phone, 1_000_001)  # over: paused at once, not at the next tick
    switch.apply(over)
    [told] = [e for e in over if isinstance(e, TellHousehold)]  # the household is told (an Events row)
    assert (told.kind, told.mac) == ("allowance", PHONE) and "paused until 04:00" in told.message
    status = router.status(PHONE)
    assert (status["paused_why"], status["paused_until"]) == ("allowance", "2026-06-02T04:00:00+02:00")
    assert not online(switch, PHONE, phone) and online(switch, LAPTOP, laptop)
    switch.apply(router.decisions.resume(PHONE))  # resume does not lift a used-up allowance...
    assert not online(switch, PHONE, phone)
    switch.apply(router.decisions.grant_bonus(PHONE, "500 MB"))  # ...a bonus does
    assert online(switch, PHONE, phone)
    assert (
        router.status(PHONE)["allowance"] | {"allowed": 501 * MB, "bonus": 500 * MB, "warning": False}
        == (router.status(PHONE)["allowance"])
    )


def test_the_allowance_starts_again_at_the_reset_and_the_bonus_ends_there(router, switch, clock, home):
    phone, _ = home
    switch.apply(router.decisions.set_allowance(PHONE, "1 MB"))
    switch.apply(router.decisions.grant_bonus(PHONE, "1 MB"))
    switch.apply(moved(router, phone, 2 * MB))
    assert not online(switch, PHONE, phone)
    at(clock, router, switch, utc(2026, 6, 2, 1, 59))  # 03:59 in Berlin
    assert not online(switch, PHONE, phone)
    at(clock, router, switch, utc(2026, 6, 2, 2, 0))  # 04:00: a new day
    assert online(switch, PHONE, phone)
    allowance = router.status(PHONE)["allowance"]
    assert (allowance["used"], allowance["bonus"], allowance["resets_at"]) == (0, 0, "2026-06-03T04:00:00+02:00")


def test_the_reset_on_the_night_the_clocks_go_forward(router, switch, clock, home):
    phone, _ = home
    router.controls.set_reset_time("02:30")  # a time the clocks skip on 29 March: the day begins at the jump
    clock.now = utc(2026, 3, 28, 20, 0)
    switch.apply(router.decisions.set_allowance(PHONE, "1 MB"))
    switch.apply(moved(router, phone, 2 * MB))
    assert router.status(PHONE)["paused_until"] == "2026-03-29T03:00:00+02:00"
    at(clock, router, switch, utc(2026, 3, 29, 0, 59, 59))
    assert not online(switch, PHONE, phone)
    at(clock, router, switch, utc(2026, 3, 29, 1, 0))
    assert online(switch, PHONE, phone) and router.status(PHONE)["allowance"]["used"] == 0


def test_counters_that_restart_count_only_what_is_new(router, switch, home):
    phone, _ = home
    switch.apply(router.decisions.set_allowance(PHONE, "10 MB"))
    moved(router, phone, 600_000, packets=100)
    moved(router, phone, 900_000, packets=150)
    moved(router, phone, 50_000, packets=10)  # the rule was replaced: its counter began again
    assert router.status(PHONE)["allowance"]["used"] == 950_000


def test_time_online_counts_minutes_with_traffic_not_background_chatter(router, switch, clock, home):
    phone, laptop = home
    switch.apply(router.decisions.set_allowance(PHONE, "30 min"))
    total = 0
    for _ in range(60):  # an hour of keep-alives: 500 bytes a minute
        clock.now += 60
        total += 500
        switch.apply(moved(router, phone, total))
    assert router.status(PHONE)["allowance"]["used"] == 0
    for _ in range(24):  # 24 minutes of a video: 80 % of 30
        clock.now += 60
        total += 200_000
        switch.apply(moved(router, phone, total))
    assert router.status(PHONE)["allowance"] | {"used": 24, "warning": True} == router.status(PHONE)["allowance"]
    for _ in range(6):
        clock.now += 60
        total += 200_000
        switch.apply(moved(router, phone, total))
    assert router.status(PHONE)["paused_why"] == "allowance" and not online(switch, PHONE, phone)
    switch.apply(router.decisions.grant_bonus(PHONE, "30 min"))
    assert online(switch, PHONE, phone)
    with pytest.raises(ApiError, match="minutes"):
        router.decisions.grant_bonus(PHONE, "500 MB")  # a bonus in the allowance's own kind


def test_bad_allowances_and_bonuses_are_refused(router, switch, home):
    for bad in ("lots", "0 min", "-1 MB", "3 days"):
        with pytest.raises(ApiError):
            router.decisions.set_allowance(PHONE, bad)
    with pytest.raises(ApiError, match="no allowance"):
        router.decisions.grant_bonus(PHONE, "30 min")
    switch.apply(router.decisions.set_allowance(PHONE, "2 h"))
    assert router.status(PHONE)["allowance"]["text"] == "120 min"
    switch.apply(router.decisions.set_allowance(PHONE, ""))
    assert router.status(PHONE)["allowance"] is None


def test_an_allowance_counts_the_switchs_counters_even_when_the_flow_records_are_lost(db_path, clock):
    """With flow export on, Flows rows come from the switch's records, which the collector drops under a
    flood: a device out of allowance must not get free traffic by flooding (it is counted from the rules'
    counters), and its records, when they do arrive, do not count it twice (positive control)."""
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 30 * 86400), clock=clock)
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    clock.now = utc(2026, 6, 1, 12, 0)
    phone, laptop = join(router, switch, PHONE), join(router, switch, LAPTOP)
    switch.apply(router.decisions.set_allowance(PHONE, "1 MB"))
    switch.apply(router.decisions.set_allowance(LAPTOP, "1 MB"))
    flow = flows.FiveTuple(flows.PROTO_TCP, laptop, 40000, INTERNET, 443)
    router.flow_events.on_flow_export({flow: [5000, 600_000]})  # the laptop's records arrived...
    switch.apply(moved(router, laptop, 600_000))  # ...and its rules counted the same bytes
    assert router.status(LAPTOP)["allowance"]["used"] == 600_000 and online(switch, LAPTOP, laptop)
    switch.apply(moved(router, phone, 2 * MB))  # the phone's records were all dropped
    assert router.status(PHONE)["paused_why"] == "allowance"
    assert not online(switch, PHONE, phone)


# ---- a shared allowance (a person's devices together)


@pytest.fixture
def shared(router, switch, home, clock):
    """Anna's phone and laptop share 1 MB a day; the tablet, someone else's, is online beside them."""
    tablet = join(router, switch, TABLET)
    switch.apply(router.decisions.set_shared_allowance("person-1", "1 MB"))
    switch.apply(router.decisions.share_allowance("person-1", f"{PHONE},{LAPTOP.upper()}"))
    return (*home, tablet)


def test_a_shared_allowance_counts_every_device_sharing_it_and_holds_them_all(router, switch, shared):
    phone, laptop, tablet = shared
    switch.apply(moved(router, phone, 500_000))
    switch.apply(moved(router, tablet, 5 * MB))  # not sharing it: counts nothing against it
    standing = router.shared_allowances("person-1")
    assert (standing["used"], standing["devices"], standing["warning"]) == (500_000, sorted([PHONE, LAPTOP]), False)
    assert (
        router.status(LAPTOP)["shared_allowance"]["used"] == 500_000
        and router.status(TABLET)["shared_allowance"] is None
    )
    switch.apply(moved(router, laptop, 300_000))
    assert router.status(PHONE)["shared_allowance"]["warning"] and online(switch, LAPTOP, laptop)
    over = moved(router, laptop, 600_000)  # 1.1 MB together: both are held at once
    switch.apply(over)
    [told] = [e for e in over if isinstance(e, TellHousehold)]  # told once, naming both
    assert "person-1 is used up" in told.message and PHONE in told.message and LAPTOP in told.message
    for mac, ip in ((PHONE, phone), (LAPTOP, laptop)):
        status = router.status(mac)
        assert (status["paused_why"], status["paused_until"]) == ("allowance", "2026-06-02T04:00:00+02:00")
        assert not online(switch, mac, ip)
    assert online(switch, TABLET, tablet)  # the positive control: another person's device goes on
    switch.apply(router.decisions.grant_shared_bonus("person-1", "500 MB"))
    assert online(switch, PHONE, phone) and online(switch, LAPTOP, laptop)
    assert router.shared_allowances("person-1")["allowed"] == 501 * MB


def test_a_device_leaving_a_shared_allowance_is_let_go_and_its_own_allowance_still_holds(router, switch, shared):
    phone, laptop, _ = shared
    switch.apply(router.decisions.set_allowance(PHONE, "200 kB"))  # its own, besides the shared one
    switch.apply(moved(router, laptop, 2 * MB))
    assert not online(switch, PHONE, phone) and not online(switch, LAPTOP, laptop)
    switch.apply(router.decisions.share_allowance("person-1", LAPTOP))  # the phone is given to someone else...
    assert router.status(PHONE)["shared_allowance"] is None
    assert online(switch, PHONE, phone) and not online(switch, LAPTOP, laptop)
    switch.apply(moved(router, phone, 300_000))  # ...and its own allowance still counts
    assert router.status(PHONE)["paused_why"] == "allowance" and not online(switch, PHONE, phone)
    switch.apply(router.decisions.set_shared_allowance("person-1", ""))  # removed: every device sharing it goes
    assert online(switch, LAPTOP, laptop) and router.shared_allowances() == []
    assert router.status(LAPTOP)["shared_allowance"] is None


def test_a_shared_allowance_and_who_shares_it_survive_a_restart_and_follow_a_moved_device(
    router, switch, clock, shared, db_path
):
    phone, laptop, _ = shared
    moved(router, phone, 700_000)
    router.tick()  # today's use is written on the tick
    router.store.flush()
    again = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    standing = again.shared_allowances("person-1")
    assert (standing["used"], standing["devices"]) == (700_000, sorted([PHONE, LAPTOP]))
    router.controls.move(PHONE, "02:00:00:00:00:ee")  # back under a private MAC: still sharing
    assert router.shared_allowances("person-1")["devices"] == sorted(["02:00:00:00:00:ee", LAPTOP])


def test_bad_shared_allowances_are_refused_and_unknown_devices_are_left_out(router, switch, home):
    for name in ("Person 1", "", "x" * 41, "02:00:00:00:00:aa"):
        with pytest.raises(ApiError):
            router.decisions.set_shared_allowance(name, "1 MB")
    with pytest.raises(ApiError, match="set its amount first") as refused:
        router.decisions.share_allowance("person-2", PHONE)
    assert refused.value.status == 404
    with pytest.raises(ApiError):
        router.decisions.set_shared_allowance("person-2", "lots")
    assert router.shared_allowances() == []
    switch.apply(router.decisions.set_shared_allowance("person-2", "2 h"))
    switch.apply(router.decisions.share_allowance("person-2", f"{PHONE},02:00:00:00:00:99"))  # never seen: left out
    assert router.shared_allowances("person-2")["devices"] == [PHONE]
    with pytest.raises(ApiError, match="minutes"):
        router.decisions.grant_shared_bonus("person-2", "500 MB")


def perform_as(router, switch, role, name, *args):
    """ws.v1's operation as `role` would have it performed (`operations.perform`): its effects on the switch."""
    op = operations.BY_NAME[name]
    return operations.perform(router, op, list(args), switch.apply, applied=True, role=role)


def test_the_wall_panels_resume_never_lifts_a_bedtime(router, switch, clock, home):
    """Finding 7 (issue 39): the panel, which may not change the schedule, lifted the owner's bedtime by
    resuming the device. Now it is refused with the reason and nothing changes; positive controls: the
    panel resumes a pause (and a pause at bedtime leaves the bedtime holding), the owner lifts the bedtime."""
    phone, _ = home
    switch.apply(router.decisions.set_schedule(PHONE, "daily 21:30-07:00"))
    at(clock, router, switch, utc(2026, 6, 1, 20, 0))
    before = router.status(PHONE)
    with pytest.raises(authority.Forbidden, match="the wall panel may not lift a bedtime"):
        perform_as(router, switch, authority.PANEL, "resume", PHONE)
    assert router.status(PHONE) == before and not online(switch, PHONE, phone)
    perform_as(router, switch, authority.PANEL, "pause", PHONE)  # paused on top of its bedtime
    assert router.status(PHONE)["paused_why"] == "paused"
    perform_as(router, switch, authority.PANEL, "resume", PHONE)  # the pause ends, the bedtime holds
    assert router.status(PHONE)["paused_why"] == "bedtime" and not online(switch, PHONE, phone)
    perform_as(router, switch, authority.OWNER, "resume", PHONE)
    assert not router.status(PHONE)["paused"] and online(switch, PHONE, phone)
