"""The board follows the controller: a joiner shows at once, and goes when the controller lets it go."""

import json
import queue
import time

from stack import HwdbServer

from homework_webui.hwdb import Hwdb as RealHwdb
from homework_webui.live import REFRESH_SPACING_S, ROUTER_RADIO, LiveHub


class Controller:
    """The controller's `status` answer, as the test sets it, and when it was asked for it."""

    def __init__(self):
        self.known: list[dict] = []
        self.asked: list[float] = []

    def status(self):
        self.asked.append(time.monotonic())
        return list(self.known)


class Hwdb:
    """An hwdb that is down: the hub's watchdog keeps trying it, the controller's side works alone."""

    def client(self):
        raise OSError("hwdb is down")


def shown(hub) -> set[str]:
    return {d["mac"] for d in hub.devices()}


def within(seconds, check) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def joiner(mac):
    return {
        "mac": mac,
        "state": "pending",
        "ip": "10.2.0.6",
        "hostname": "",
        "name": "",
        "vendor_class": "",
        "first_seen": 0,
        "last_seen": 0,
        "lease_seconds_left": 30,
    }


def test_a_joiner_the_controller_forgot_leaves_the_board_and_one_it_knows_stays():
    controller = Controller()
    hub = LiveHub(controller, Hwdb())
    hub.start()
    try:
        assert within(2, lambda: controller.asked)
        controller.known = [joiner("02:00:00:00:00:01")]
        hub._on_events(
            [
                {"tstamp": 1, "kind": "new-device", "mac": "02:00:00:00:00:01", "message": "phone asks to join"},
                {"tstamp": 2, "kind": "new-device", "mac": "02:ff:00:00:00:99", "message": "forged, already evicted"},
            ]
        )
        assert within(2, lambda: shown(hub) == {"02:00:00:00:00:01"}), shown(hub)
    finally:
        hub.stop()


def test_a_storms_lease_rows_ask_the_controller_for_every_status_twice_a_second_and_a_lone_join_at_once():
    """In a storm of forged MACs the controller's hwdb batches arrive every 0.2 s; each asked for every
    device's status, and assembling them competed with the other devices' DHCP and DNS (issue 39)."""
    controller = Controller()
    hub = LiveHub(controller, Hwdb())
    hub.start()
    try:
        assert within(2, lambda: controller.asked)
        time.sleep(REFRESH_SPACING_S)
        controller.asked.clear()
        storm_started = time.monotonic()
        for n in range(100):  # 2 s of batches every 20 ms, ten times as often as the controller writes them
            controller.known = [joiner(f"02:ff:00:00:00:{n:02x}")]
            hub._on_leases([{"mac": controller.known[0]["mac"]}])
            time.sleep(0.02)
        storm_s = time.monotonic() - storm_started
        # The last batch's devices are shown (nothing is lost by asking less often) ...
        assert within(2, lambda: shown(hub) == {"02:ff:00:00:00:63"}), shown(hub)
        # ... but the controller was asked at most once per spacing, not once per batch.
        assert len(controller.asked) <= storm_s / REFRESH_SPACING_S + 2, len(controller.asked)
        time.sleep(REFRESH_SPACING_S)
        controller.asked.clear()
        controller.known = [joiner("02:00:00:00:00:01")]
        lone_join = time.monotonic()
        hub._on_leases([{"mac": "02:00:00:00:00:01"}])
        assert within(2, lambda: shown(hub) == {"02:00:00:00:00:01"})
        assert controller.asked[0] - lone_join < 0.2  # a lone join is asked about at once, not after a spacing
    finally:
        hub.stop()


def test_an_overload_event_written_while_hwdb_restarts_still_reaches_the_phone(tmp_path):
    """hwdb's subscriptions die with it; an Events row written before the hub has subscribed
    again must still reach the browsers (the hub catches up from the persistent table)."""
    hwdb = HwdbServer(str(tmp_path / "hwdb.sqlite")).start()
    hub = LiveHub(Controller(), RealHwdb("127.0.0.1", hwdb.port), watchdog_interval=0.2)
    hub.start()
    phone = hub.register("member", "s1", 1)
    try:
        first = "high-priority queue dropped 10 packets in 10 s"
        hwdb.query(f"insert into Events values ('qos-overload', '', '{first}')")
        assert first in alerts_within(phone, 5)  # positive control: the live path works
        hwdb.stop()
        hwdb.start()
        second = "high-priority queue dropped 312 packets in 10 s"
        hwdb.query(f"insert into Events values ('qos-overload', '', '{second}')")
        seen = alerts_within(phone, 5, until=second)
        assert second in seen
        assert first not in seen, "an alert already shown is not shown again"
    finally:
        hub.stop()
        hwdb.stop()


def alerts_within(client, seconds, until=None) -> list[str]:
    """The alert messages the client's stream receives within `seconds` (or until `until`)."""
    seen, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            message = client.queue.get(timeout=0.1)
        except queue.Empty:
            continue
        if message and message.startswith("event: alert"):
            seen.append(json.loads(message.split("data: ", 1)[1])["message"])
            if until is None or until in seen:
                # a little longer, to see a duplicate if one comes
                deadline = min(deadline, time.monotonic() + 1.0)
    return seen


def test_a_newcomer_a_storm_and_a_used_up_allowance_reach_the_phones_but_not_the_wall_panel():
    """The phone page notifies of these (frontend/src/lib/notify.ts); the wall panel is told
    nothing it does not show, while it still hears of a copied address, which it shows."""
    hub = LiveHub(Controller(), Hwdb())
    phone, panel = hub.register("member", "s1", 1), hub.register("kiosk", "s2", 2)
    told = [
        ("new-device", "02:00:00:00:00:01", "htc-one-x (02:00:00:00:00:01) asks to join"),
        ("newcomer-storm", "", "40 devices asked to join within 10 seconds"),
        ("allowance", "02:00:00:00:00:02", "tablet has used up today's allowance; paused until 04:00"),
        ("mac-clone", "02:00:00:00:00:03", "tv: its address is being used by another device too"),
    ]
    hub._on_events([{"tstamp": i + 1, "kind": k, "mac": m, "message": msg} for i, (k, m, msg) in enumerate(told)])
    assert alerts_within(phone, 0.2) == [msg for _, _, msg in told]
    assert alerts_within(panel, 0.2) == [told[3][2]]


def test_a_newcomer_may_be_acted_on_at_once_even_while_lease_rows_are_spaced():
    """The board acts on a device by what the controller says each role may do to it (`may`), which the
    new-device row's placeholder lacks: a newcomer is asked about at once, not after the spacing (the wall
    panel's keyboard refusal of a fresh joiner did nothing when the answer came 0.5 s later)."""
    controller = Controller()
    hub = LiveHub(controller, Hwdb())
    hub.start()
    try:
        assert within(2, lambda: controller.asked)
        hub._on_leases([{"mac": "02:00:00:00:00:02"}])  # a refresh now: the next for Leases rows is spaced
        assert within(2, lambda: len(controller.asked) >= 2)
        newcomer = "02:00:00:00:00:01"
        controller.known = [{**joiner(newcomer), "may": ["permit", "deny"]}]
        hub._on_events([{"tstamp": 1, "kind": "new-device", "mac": newcomer, "message": "phone asks to join"}])
        [shown] = [d for d in hub.devices() if d["mac"] == newcomer]
        assert shown.get("may") == ["permit", "deny"]
    finally:
        hub.stop()


SATELLITE, ON_SATELLITE, ON_RADIO, WIRED = (
    "02:5a:00:00:00:01",
    "02:00:00:00:00:0a",
    "02:00:00:00:00:0b",
    "02:00:00:00:00:0c",
)


def at_port(mac: str, port: int | None) -> dict:
    return {**joiner(mac), "state": "permitted", "access_port": port}


def test_the_board_names_the_access_point_each_device_is_on():
    """The satellite whose cable's port a station is bound to names it; a station the router's radio hears is
    on the router; a wired device, and the satellite's own device on its cable, on none."""
    hub = LiveHub(Controller(), Hwdb(), satellites=lambda: [{"id": 7, "name": "Landing", "mac": SATELLITE}])
    for mac, port in ((SATELLITE, 2), (ON_SATELLITE, 2), (ON_RADIO, 1), (WIRED, 3)):
        hub.update_device(at_port(mac, port))
    hub._on_links([{"mac": ON_RADIO, "rssi": -48, "retries": 0, "packets": 10}])
    named = {d["mac"]: d["access_point"] for d in hub.devices()}
    assert named == {SATELLITE: None, ON_SATELLITE: "Landing", ON_RADIO: ROUTER_RADIO, WIRED: None}
    # It roams to the router's radio: its rules follow it to the radio's port, and so does its name.
    hub.update_device(at_port(ON_SATELLITE, 1))
    hub._on_links([{"mac": ON_SATELLITE, "rssi": -60, "retries": 0, "packets": 10}])
    assert {d["mac"]: d["access_point"] for d in hub.devices()}[ON_SATELLITE] == ROUTER_RADIO


def test_without_a_satellite_every_station_is_on_the_routers_radio():
    hub = LiveHub(Controller(), Hwdb())
    hub.update_device(at_port(ON_RADIO, None))  # one access port: the router binds nobody to it
    hub.update_device(at_port(WIRED, None))
    hub._on_links([{"mac": ON_RADIO, "rssi": -48, "retries": 0, "packets": 10}])
    assert {d["mac"]: d["access_point"] for d in hub.devices()} == {ON_RADIO: ROUTER_RADIO, WIRED: None}
