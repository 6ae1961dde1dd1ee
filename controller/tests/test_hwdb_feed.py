"""The app feed against a real hwdb server: the household's priorities restored from history and
followed live (a change re-marks a running flow within a second), agents' rows checked, and the
subscriptions renewed when hwdb restarts."""

import logging
import os
import socket
import subprocess
import threading
import time

import pytest
from fakeoftable import FakeSwitch
from support import EF, PHONE, ROUTER_MAC, WEB, WLAN, ZOOM, Clock, deliver, join, mark_of, up

from homework_controller.concerns.agent_reports import AgentReport
from homework_controller.edge.feeds import hwdb_feed
from hwdb_client import HwdbClient, HwdbError, default_binary

BIN = default_binary()
needs_hwdb = pytest.mark.skipif(BIN is None or not os.path.exists(BIN), reason="no hwdb binary (build hwdb)")


def test_priority_rows_last_per_app_wins_and_a_bad_row_costs_only_itself():
    rows = [
        {"app": "web", "priority": "high"},
        {"app": "web", "priority": "default"},
        {"app": "games", "priority": "urgent"},
        {"app": "x" * 65, "priority": "high"},
        {"app": "video-call", "priority": "high"},
    ]
    assert hwdb_feed.parse_priorities(rows) == {"web": "default", "video-call": "high"}


def test_agent_rows_are_checked_field_by_field():
    good = {"proto": 17, "saddr": "10.2.0.6", "sport": 5060, "daddr": "*", "dport": 0, "app": "linphone"}
    rows = [
        good,
        {**good, "proto": 1},
        {**good, "saddr": "not-an-address"},
        {**good, "sport": 0},
        {**good, "daddr": "*", "dport": 53},
        {**good, "app": ""},
        {**good, "daddr": "198.51.100.7", "dport": 0},
        {**good, "proto": 6, "daddr": "198.51.100.7", "dport": 443, "app": "firefox"},
    ]
    assert hwdb_feed.parse_reports(rows) == [
        AgentReport(17, "10.2.0.6", 5060, "*", 0, "linphone"),
        AgentReport(6, "10.2.0.6", 5060, "198.51.100.7", 443, "firefox"),
    ]


def test_a_burst_of_bad_rows_is_counted_and_logged_in_a_bounded_number_of_lines(caplog):
    """One device may insert bad AppTuples rows as fast as it likes: a line per row (with the whole row)
    would grow the log's queue without bound. The rows are counted; the log says so now and then."""
    clock = Clock()
    rejected = hwdb_feed.RejectedRows("AppTuples", clock=clock)
    good = {"proto": 6, "saddr": "10.2.0.6", "sport": 40000, "daddr": "198.51.100.7", "dport": 443, "app": "firefox"}
    bad = {**good, "proto": 1, "app": "x" * 10000}
    with caplog.at_level(logging.WARNING, logger="homework_controller.edge.feeds.hwdb_feed"):
        for _ in range(5):
            clock.now += 1
            assert hwdb_feed.parse_reports([bad] * 2000 + [good], rejected) == [
                AgentReport(6, "10.2.0.6", 40000, "198.51.100.7", 443, "firefox")  # a good row still counts
            ]
    assert rejected.count == 10000
    [line] = [r.getMessage() for r in caplog.records]
    assert "ignored 1 AppTuples row(s)" in line and len(line) < 400  # the row is cut short, not written whole
    # A minute on, the next bad row is logged with how many were ignored meanwhile.
    clock.now += hwdb_feed.REJECTED_LOG_S
    with caplog.at_level(logging.WARNING, logger="homework_controller.edge.feeds.hwdb_feed"):
        hwdb_feed.parse_reports([bad], rejected)
    assert "ignored 10000 AppTuples row(s) since the last such line (10001 in all)" in caplog.records[-1].getMessage()


def test_a_batch_keeps_each_connection_once_and_at_most_a_devices_cap_per_address_the_latest():
    flood = [
        {"proto": 6, "saddr": "10.2.0.6", "sport": 1024 + i, "daddr": "198.51.100.7", "dport": 443, "app": "flood"}
        for i in range(500)
    ]
    quiet = {"proto": 17, "saddr": "10.2.0.10", "sport": 5004, "daddr": "*", "dport": 0, "app": "linphone"}
    again = {**quiet, "app": "linphone-2"}
    reports = hwdb_feed.parse_reports([quiet, *flood, again], per_address=100)
    assert [r.sport for r in reports if r.saddr == "10.2.0.6"] == list(range(1424, 1524))
    assert [r.process for r in reports if r.saddr == "10.2.0.10"] == ["linphone-2"]  # the later report wins
    # Positive control: a device under the cap keeps all its rows.
    assert len(hwdb_feed.parse_reports(flood[:100], per_address=100)) == 100


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Hwdb:
    def __init__(self, db):
        self.db, self.port, self.proc = db, free_port(), None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [BIN, "serve", "--listen", f"127.0.0.1:{self.port}", "--db", self.db], stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                self.query("show tables")
                return
            except HwdbError:
                if time.monotonic() > deadline:
                    raise

    def query(self, text):
        with HwdbClient("127.0.0.1", self.port, timeout=2.0, rto=0.02) as c:
            return c.query(text)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def hwdb(tmp_path):
    server = Hwdb(str(tmp_path / "hwdb.sqlite"))
    yield server
    server.stop()


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@needs_hwdb
def test_priorities_are_restored_then_followed_and_a_change_re_marks_a_running_flow_within_a_second(hwdb, router):
    hwdb.query("insert into AppPriority values ('web', 'high')")
    hwdb.query("insert into AppPriority values ('web', 'default'), ('games', 'high')")
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    phone = join(router, switch, PHONE)
    lock = threading.Lock()

    def on_priorities(priorities):
        with lock:
            switch.apply(router.set_app_priorities(priorities))

    def on_reports(reports):
        with lock:
            switch.apply(router.flow_events.agent_reported(reports))

    feed = hwdb_feed.AppFeed(f"127.0.0.1:{hwdb.port}", on_priorities, on_reports, check_s=0.5)
    feed.start()
    try:
        assert feed.restored.wait(10)
        assert router.priorities.chosen == {"web": "default", "games": "high"}  # the last row per app
        web = up(phone, WEB)
        with lock:
            assert mark_of(switch, web)[0] == 0
        asked = time.monotonic()
        hwdb.query("insert into AppPriority values ('web', 'high')")

        def marked():
            with lock:
                [out] = deliver(switch, web)
            return out.packet.get("ip_dscp") == EF

        wait_for(marked)
        assert time.monotonic() - asked < 1.0
        # An agent's rows: a bad one is dropped, the good one labels the phone's connection.
        call = up(phone, ZOOM, 17, 50000, 40001)
        with lock:
            assert mark_of(switch, call)[0] == 0
        hwdb.query(
            f"insert into AppTuples values (1, '{phone}', 1, '*', 0, 'zoom', 'pc'), "
            f"(17, '{phone}', 50000, '198.51.100.7', 40001, 'zoom', 'pc')"
        )

        def call_marked():
            with lock:
                [out] = deliver(switch, call)
            return out.packet.get("ip_dscp") == EF

        wait_for(call_marked)
        # hwdb restarts (its subscriptions are gone): the feed subscribes again and keeps following.
        hwdb.stop()
        hwdb.start()
        # Another client (the web UI) subscribes first: its new subscriptions carry the ids the
        # feed's had before the restart, which must not pass for the feed's own.
        other = HwdbClient("127.0.0.1", hwdb.port, timeout=5.0)
        squatters = [other.subscribe("select * from Events", lambda r: None) for _ in range(2)]
        try:
            wait_for(lambda: feed.subscribed and len(hwdb.query("show subscriptions").rows) == 4, timeout=10)
            hwdb.query("insert into AppPriority values ('web', 'medium')")
            wait_for(lambda: router.priorities.chosen.get("web") == "medium", timeout=3)
        finally:
            for squatter in squatters:
                squatter.close()
    finally:
        feed.stop()
