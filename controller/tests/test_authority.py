"""Who may do what (issue 39), generated from the controller's own table (`authority.TABLE`): every ws.v1
operation that acts on the router, as every role, against a device in every state, on a real
`HomeRouter` over the fake switch, performed as ws.v1 performs it (`operations.perform`). What the table
refuses is refused with its reason and leaves the router as it was (every device's status, the switch's
rules, the SQLite file); what it allows is done, or refused by the device's own rule for every role
(a blacklisted device is permitted by nobody until whitelisted: 409; only a permitted device gets its
own passphrase: 400), also changing nothing.

The expected target states are the scenario's, as the test built it, not `authority.target_states`'s
reading of the router, so a wrong reading fails here too."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from fakeoftable import FakeSwitch
from support import PHONE, ROUTER_MAC, WLAN, join

from homework_controller.api import authority, operations
from homework_controller.api.server import TimedLock
from homework_controller.core.router import HomeRouter
from homework_controller.edge import ofapp
from homework_controller.errors import ApiError
from homework_controller.policy import dhcp
from homework_controller.radio.radio_settings import RadioSettingsFile
from homework_controller.store import DeviceStore

NEW = "06:11:22:33:44:55"  # a newcomer with the phone's DHCP client
CLIENT = [("hostname", b"annas-phone"), ("param_req_list", [1, 3, 6, 15, 26, 28, 51, 58, 59, 43])]
LEASE = 3600
TEN_PM = 1_780_351_200.0  # Mon 1 June 2026, 22:00 UTC: inside the phone's bedtime
ARGUMENTS = {
    "domain": "games.example.test",
    "name": "Anna's phone",
    "duration": "30",
    "windows": "daily 21:00-07:00",
    "amount": "30 min",
    "zone": "UTC",
    "at": "04:00",
    "shared": "person-1",
    "prefix": "fdee:1:2:3::/64",
    "event": "joined",
    "keyid": "",
}
# satellite-keys reads the radio's file beside the router: checked where ofapp performs it (below).
ON_THE_ROUTER = [op for op in operations.OPERATIONS if op.answers not in ("edge", "radio", "satellite")]
SATELLITE_ONLY = {"satellite-keys", "satellite-station", "satellite-links"}
# Those on the router: each needs a satellite on an access port of its own, which no scenario has.
SATELLITES_WORD = sorted(SATELLITE_ONLY & {op.name for op in ON_THE_ROUTER})

# Each scenario: what the household did to the phone, and the states the phone is then in.
SCENARIOS = {
    "pending": {authority.PENDING},
    "permitted": {authority.PERMITTED},
    "denied": {authority.DENIED},
    "blacklisted": {authority.BLACKLISTED},
    "paused": {authority.PERMITTED, authority.PAUSED},
    "bedtime": {authority.PERMITTED, authority.BEDTIME},
    "offered": {authority.PERMITTED},  # away, and the newcomer is offered as it
}


class Home:
    """A router whose phone is in the scenario's state, with the newcomer beside it."""

    def __init__(self, db_path: str, scenario: str):
        self.db_path, self.now = db_path, [TEN_PM - 600]
        self.router = HomeRouter(
            DeviceStore(db_path), dhcp.LeasePolicy(30, LEASE), clock=lambda: self.now[0], wifi_ssid="home"
        )
        self.switch = FakeSwitch()
        self.switch.apply(self.router.switch_ready(WLAN, ROUTER_MAC))
        # Every effect carried out by the switch (it holds each device's meter before a rule names it).
        join(self.router, self.switch, PHONE, permit=scenario != "pending", client=CLIENT)
        self.router.decisions.set_allowance(PHONE, "2 h")
        self.router.decisions.set_shared_allowance("person-1", "2 h")
        self.router.decisions.share_allowance("person-1", PHONE)
        if scenario in ("denied", "blacklisted"):
            decide = {"denied": self.router.decisions.deny, "blacklisted": self.router.decisions.blacklist}[scenario]
            self.switch.apply(decide(PHONE))
        if scenario == "paused":
            self.switch.apply(self.router.decisions.pause(PHONE))
        if scenario == "bedtime":
            self.switch.apply(self.router.decisions.set_schedule(PHONE, "daily 21:00-07:00"))
        self.now[0] = TEN_PM + (LEASE + 1 if scenario == "offered" else 0)
        self.switch.apply(self.router.tick())
        join(self.router, self.switch, NEW, permit=False, client=CLIENT)
        self.ip = self.router.status(PHONE)["ip"]
        assert (self.router.status(NEW)["looks_like"] or {}).get("mac") == (PHONE if scenario == "offered" else None)

    def args(self, op: operations.Operation) -> list:
        values = {"mac": NEW if op.name == "merge" else PHONE, "into": PHONE, "ip": self.ip, "devices": PHONE}
        values |= ARGUMENTS
        body = {"links": [{"mac": PHONE, "rssi": -50, "retries": 0, "packets": 10}]}  # satellite-links'
        return [values[p] for p in op.path] + ([values[op.query]] if op.query else []) + ([body] if op.body else [])

    def snapshot(self) -> tuple:
        """What a refusal must leave as it was: every device's status, the switch's rules, the file."""
        assert self.router.store.flush()
        with sqlite3.connect(self.db_path) as db:
            tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            disk = {table: sorted(map(repr, db.execute(f"SELECT * FROM {table}"))) for table in tables}
        rules = sorted(map(repr, self.switch.rules))
        return json.dumps(self.router.status(), sort_keys=True), rules, disk


def expected_states(op: operations.Operation, scenario: str) -> frozenset[str]:
    offered = op.name == "merge" and scenario == "offered"
    return frozenset(SCENARIOS[scenario] | ({authority.OFFERED} if offered else set()))


def test_the_table_declares_every_operation_and_names_only_known_roles_and_states():
    assert set(authority.TABLE) == set(operations.BY_NAME) == set(authority.WHAT)
    for granted in authority.TABLE.values():
        assert set(granted) <= set(authority.ROLES)
        assert all(set(refused) <= set(authority.STATES) for refused in granted.values())
    assert not any(authority.ISP in granted for granted in authority.TABLE.values())  # the ISP side: none
    assert {op for op, granted in authority.TABLE.items() if authority.DEVICE in granted} == {"portal"}
    # A satellite access point reads its keys and reports its stations, and nothing else; nobody else may either.
    assert {op for op, granted in authority.TABLE.items() if authority.SATELLITE in granted} == SATELLITE_ONLY
    assert all(set(authority.TABLE[op]) == {authority.SATELLITE} for op in SATELLITE_ONLY)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_operation_as_every_role_against_the_device_in_this_state(tmp_path, scenario):
    built: list[Home] = []

    def fresh() -> Home:
        if built:
            built[-1].router.store.close()  # its file and writer thread: hundreds of homes are built
        built.append(Home(str(tmp_path / f"controller-{len(built)}.sqlite"), scenario))
        return built[-1]

    home = fresh()
    done, refused, refused_by_the_device = [], [], []
    for op in ON_THE_ROUTER:
        for role in authority.ROLES:
            why = authority.refusal(role, op.name, expected_states(op, scenario))
            before = home.snapshot()
            try:
                operations.perform(home.router, op, home.args(op), home.switch.apply, applied=True, role=role)
            except authority.Forbidden as exc:
                assert why is not None, f"{role} was refused {op.name} on a {scenario} device: {exc}"
                assert str(exc) == why
                assert home.snapshot() == before, f"{role}'s refused {op.name} changed the router"
                refused.append((op.name, role))
                continue
            except ApiError as exc:  # the device's own rule, for every role
                assert why is None, f"{role} may not {op.name} ({why}) but got {exc.status}: {exc}"
                # 409 (its state), 400 (e.g. only a permitted device gets a passphrase), 404 (it has none)
                assert exc.status in (400, 404, 409), (op.name, role, exc.status, str(exc))
                assert home.snapshot() == before, f"{role}'s {op.name}, refused by the device's state, changed it"
                refused_by_the_device.append((op.name, role))
                continue
            assert why is None, f"{role} did {op.name} on a {scenario} device, which the table refuses: {why}"
            done.append((op.name, role))
            if op.verb == "POST":
                home = fresh()  # changed: the next operation starts from the scenario again
    # What the device's status offers each signed-in role (`may`) is what the calls above showed: every
    # verb on a device it lists was not refused by the table (done, or refused everyone alike by the
    # device's own rule), every one it leaves out was refused (403). A merge, on the newcomer's status, is
    # listed when it was done: into the device offered for it, and only then (there is nothing else to
    # merge into).
    statuses = {device["mac"]: device for device in operations.status(home.router)}
    for role in authority.SIGNED_IN:
        for verb in operations.DEVICE_VERBS:
            listed = verb in statuses[NEW if verb == "merge" else PHONE]["may"][role]
            succeeds = (verb, role) in done if verb == "merge" else (verb, role) not in refused
            assert listed == succeeds, f"a {scenario} device's status lists {verb} for {role}: {listed}"
    assert statuses[PHONE] == operations.status(home.router, PHONE)  # the single-device form says the same
    # The owner does everything on the router but what the device's state refuses everyone, and a satellite's
    # own word (its stations), which is the satellite's alone.
    assert {name for name, role in done if role == authority.OWNER} | {
        name for name, role in refused_by_the_device if role == authority.OWNER
    } == {op.name for op in ON_THE_ROUTER} - SATELLITE_ONLY
    assert sorted(r for r in refused if r[1] == authority.OWNER) == [(op, authority.OWNER) for op in SATELLITES_WORD]
    # Every other role is refused a satellite's word (the satellite role reaches it: here the phone is no
    # satellite on an access port of its own, one port only, so the router cannot place it: 409, nothing changed).
    for name in SATELLITES_WORD:
        assert {r for r in refused if r[0] == name} == {
            (name, role) for role in authority.ROLES if role != authority.SATELLITE
        }
        assert (name, authority.SATELLITE) in refused_by_the_device
    # And a satellite is refused every household verb.
    assert not [name for name, role in done if role == authority.SATELLITE]
    assert {(name, role) for name, role in done} >= {("status", authority.PANEL), ("pause", authority.PANEL)}
    merge_done = ("merge", authority.PANEL) in done
    assert merge_done == (scenario == "offered"), "a newcomer merges only into the device it was offered as"
    assert (("resume", authority.PANEL) in refused) == (scenario == "bedtime")
    home.router.store.close()


def test_what_the_device_state_refuses_everyone_is_refused_the_owner_too(tmp_path):
    """The positive controls' other side: the owner is refused a permit of a blacklisted device (409),
    a merge into a device not offered (409); the panel's own refusals say so as 403 with the reason."""
    home = Home(str(tmp_path / "c.sqlite"), "blacklisted")
    permit, merge = operations.BY_NAME["permit"], operations.BY_NAME["merge"]
    for op in (permit, merge):
        with pytest.raises(ApiError) as refused:
            operations.perform(home.router, op, home.args(op), home.switch.apply, True, authority.OWNER)
        assert refused.value.status == 409
    with pytest.raises(authority.Forbidden, match="the wall panel may not lift a blacklist"):
        operations.perform(home.router, permit, home.args(permit), home.switch.apply, True, authority.PANEL)
    home.router.store.close()


def test_the_edges_and_the_radios_operations_are_checked_where_ofapp_performs_them(tmp_path):
    """The operations `ofapp.call` answers off the router (health, counters and their phase, the radio's
    settings) name no device: each role is refused or served as the table says, before the radio's file is
    read or written or the edge's state looked at (this stub has none)."""
    app = ofapp.HomeworkController.__new__(ofapp.HomeworkController)  # the I/O edge without its sockets
    settings = tmp_path / "wifi.conf"
    settings.write_text("ssid=Our house\npassphrase=correct horse battery\ncountry=GB\nband=2.4\nchannel=6\n")
    app.lock, app.radio_settings = TimedLock(), RadioSettingsFile(str(settings))
    phase_started = app.lock.phase_started
    for role in authority.ROLES:
        for name, args in (("radio-settings", ()), ("set-radio-settings", ({"channel": 1},))):
            why = authority.refusal(role, name, frozenset())
            if why is None:
                continue  # the owner's, below
            with pytest.raises(authority.Forbidden, match=re.escape(why)):
                app.call(name, *args, role=role)
        for name in (op.name for op in operations.OPERATIONS if op.answers == "edge"):
            why = authority.refusal(role, name, frozenset())
            if why is not None:
                with pytest.raises(authority.Forbidden, match=re.escape(why)):
                    app.call(name, role=role)
    assert "channel=6" in settings.read_text()
    assert app.lock.phase_started == phase_started  # a refused `counters-phase` started none
    started = app.call("counters-phase", role=authority.OWNER)["lock_phase_started"]  # the owner's (make bench's)
    assert app.lock.phase_started > phase_started and started == round(app.lock.phase_started, 3)
    assert app.call("radio-settings", role=authority.OWNER)["ssid"] == "Our house"
    assert app.call("set-radio-settings", {"channel": 1}, role=authority.OWNER)["channel"] == 1
    assert "channel=1" in settings.read_text()
