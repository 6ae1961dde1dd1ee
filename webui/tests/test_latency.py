"""The phone page's "latency under load" check: grading (pure), and the endpoint end to end
against a real local test server (tests/stack.SpeedTestServer) and a real hwdb."""

import threading
import time

import pytest
from conftest import Api, signed_in
from stack import SpeedTestServer

from homework_webui.app import create_app
from homework_webui.latency import LatencyCheck, Target, grade, summarise
from homework_webui.services import services

LINE_KBIT = 20000
LOAD_SECONDS = 1.0


@pytest.mark.parametrize(
    "added_ms, letter",
    [
        (0, "A+"),
        (4.99, "A+"),
        (5, "A"),
        (29.9, "A"),
        (30, "B"),
        (59.9, "B"),
        (60, "C"),
        (199.9, "C"),
        (200, "D"),
        (399.9, "D"),
        (400, "F"),
        (5000, "F"),
    ],
)
def test_grades_follow_the_bufferbloat_scale(added_ms, letter):
    assert grade(added_ms) == letter


def test_summary_adds_latency_over_idle_and_counts_lost_probes_as_timeouts():
    # Idle 10 ms; under load 8 answered probes of 40..110 ms and 2 lost (1000 ms timeout).
    loaded = [40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 110.0]
    r = summarise(
        [9.0, 10.0, 11.0],
        loaded,
        loaded_sent=10,
        down_bytes=10_000_000,
        up_bytes=2_500_000,
        seconds=8.0,
        probe_timeout_ms=1000.0,
    )
    assert r["idle_ms"] == 10.0
    assert r["loaded_ms"] == 85.0 and r["added_ms"] == 75.0 and r["grade"] == "C"
    assert r["loaded_p90_ms"] == 1000.0 and r["added_p90_ms"] == 990.0
    assert r["loss_pct"] == 20.0
    assert (r["down_kbit"], r["up_kbit"]) == (10000, 2500)
    # A connection that answers nothing under load is an F, not a perfect score.
    dead = summarise([10.0], [], loaded_sent=5, down_bytes=0, up_bytes=0, seconds=8.0, probe_timeout_ms=1000.0)
    assert dead["grade"] == "F" and dead["loss_pct"] == 100.0


def test_target_must_be_an_http_url():
    assert Target.parse("http://192.0.2.7:8000/speed/") == Target("192.0.2.7", 8000, "/speed")
    assert Target.parse("http://test.example").port == 80
    for bad in ("https://test.example", "ftp://x", "test.example:80", "http://"):
        with pytest.raises(ValueError):
            Target.parse(bad)


@pytest.fixture
def speed():
    server = SpeedTestServer(kbit=LINE_KBIT).start()
    yield server
    server.stop()


@pytest.fixture
def checked_app(tmp_path, controller, hwdb, speed):
    app = create_app(
        str(tmp_path / "state"),
        controller.url,
        ("127.0.0.1", hwdb.port),
        dist_dir=str(tmp_path / "nodist"),
        latency_check=LatencyCheck(Target.parse(speed.url), duration=LOAD_SECONDS),
    )
    yield app
    services(app).hub.stop()


def test_check_is_recorded_in_hwdb_and_shown(checked_app, hwdb, speed):
    member = signed_in(checked_app, "member")
    r = member.post("/api/latency-check")
    assert r.status_code == 200, r.json
    result = r.json["result"]
    assert r.json["recorded"] is True
    assert result["grade"] == grade(result["added_ms"])
    assert result["idle_ms"] > 0 and result["loaded_ms"] > 0
    # Both directions really ran against the server, paced at its line rate.
    assert speed.hits["bulk"] >= 1 and speed.hits["sink"] >= 1
    assert LINE_KBIT * 0.3 < result["down_kbit"] < LINE_KBIT * 1.5, result
    # Upload counts what the server's kernel acknowledged: on loopback its receive buffer
    # takes megabytes ahead of the paced reader, so only a lower bound holds here.
    assert result["up_kbit"] > LINE_KBIT * 0.3, result
    assert result["probes"]["loaded"] >= 5

    recorded = [{k: result[k] for k in ("grade", "added_ms", "down_kbit", "up_kbit", "loss_pct")}]
    query = "select grade, added_ms, down_kbit, up_kbit, loss_pct from LatencyChecks"
    assert hwdb.query(query).rows == recorded
    hwdb.stop()  # a persistent table: the history survives the router restarting hwdb
    hwdb.start()
    assert hwdb.query(query).rows == recorded
    shown = member.get("/api/latency-check").json
    assert shown["configured"] is True and shown["running"] is False and shown["duration_s"] == LOAD_SECONDS
    assert [{k: s[k] for k in ("grade", "added_ms", "down_kbit")} for s in shown["results"]] == [
        {k: result[k] for k in ("grade", "added_ms", "down_kbit")}
    ]


def test_second_check_while_one_runs_gets_409(checked_app):
    owner = signed_in(checked_app, "owner")
    member = signed_in(checked_app, "member", owner)
    first: dict = {}
    runner = threading.Thread(target=lambda: first.update(r=owner.post("/api/latency-check")))
    runner.start()
    deadline = time.monotonic() + 20
    while not member.get("/api/latency-check").json["running"]:
        assert time.monotonic() < deadline and runner.is_alive(), "the first check never ran"
        time.sleep(0.02)
    r = member.post("/api/latency-check")
    assert r.status_code == 409 and "already running" in r.json["error"], r.json
    runner.join(30)
    assert first["r"].status_code == 200
    # Positive control: once it has finished, the same member may run one.
    assert member.post("/api/latency-check").status_code == 200
    assert len(member.get("/api/latency-check").json["results"]) == 2


def test_only_signed_in_household_members_may_run_it(checked_app, speed):
    owner = signed_in(checked_app, "owner")
    kiosk = signed_in(checked_app, "kiosk", owner)
    guest = Api(checked_app)
    guest.session()
    assert guest.post("/api/latency-check").status_code == 401
    assert guest.get("/api/latency-check").status_code == 401
    r = kiosk.post("/api/latency-check")
    assert r.status_code == 403 and r.json["code"] == "role"
    assert speed.hits == {"bulk": 0, "sink": 0}, "a refused caller must not load the line"
    assert owner.post("/api/latency-check").status_code == 200
    assert speed.hits["bulk"] >= 1


def test_a_looping_page_is_rate_limited_per_account(checked_app):
    owner = signed_in(checked_app, "owner")
    member = signed_in(checked_app, "member", owner)
    for _ in range(3):
        assert member.post("/api/latency-check").status_code == 200
    r = member.post("/api/latency-check")
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    # Someone else in the home still may.
    assert owner.post("/api/latency-check").status_code == 200


def test_unreachable_test_server_is_a_clear_error_and_records_nothing(tmp_path, controller, hwdb):
    gone = SpeedTestServer()
    gone.server.server_close()  # its port was ours a moment ago: nothing listens there now
    app = create_app(
        str(tmp_path / "state"),
        controller.url,
        ("127.0.0.1", hwdb.port),
        dist_dir=str(tmp_path / "nodist"),
        latency_check=LatencyCheck(Target.parse(gone.url), duration=LOAD_SECONDS),
    )
    try:
        owner = signed_in(app, "owner")
        r = owner.post("/api/latency-check")
        assert r.status_code == 502 and f"127.0.0.1:{gone.port}" in r.json["error"], r.json
        assert owner.get("/api/latency-check").json["results"] == []
    finally:
        services(app).hub.stop()


def test_without_a_target_the_check_says_it_is_not_configured(app):
    owner = signed_in(app, "owner")
    shown = owner.get("/api/latency-check").json
    assert shown["configured"] is False and "not configured" in shown["message"]
    r = owner.post("/api/latency-check")
    assert r.status_code == 501 and "not configured" in r.json["error"]


def test_shaper_queue_discipline_shown_when_the_controller_reports_it(app, controller):
    owner = signed_in(app, "owner")
    assert owner.get("/api/latency-check").json["qos"] is None
    controller.qos = {
        "uplink": {
            "iface": "eth0",
            "line_kbit": 20000,
            "shaped_kbit": 18000,
            "high_kbit": 5400,
            "leaf_qdisc": "fq_codel",
            "error": "",
        },
        "downlink": {
            "iface": "wlan0",
            "line_kbit": 50000,
            "shaped_kbit": 45000,
            "high_kbit": 13500,
            "leaf_qdisc": "fq_codel",
            "error": "",
        },
        "demoted_devices": [],
    }
    assert owner.get("/api/latency-check").json["qos"] == {
        "leaf": "fq_codel",
        "uplink_kbit": 18000,
        "downlink_kbit": 45000,
    }
