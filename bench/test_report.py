"""docs/PERFORMANCE.md says in its first line whether its results are one run (bench/report.py)."""

import json
import subprocess
import sys
from pathlib import Path

import report

LAPTOP = {"hostname": "laptop", "cpu": "AMD EPYC", "cores": 2, "memory_gib": 23.5}
DESKTOP = {"hostname": "desktop", "cpu": "Intel Xeon", "cores": 8, "memory_gib": 64.0}


def stamp(commit: str, date: str, machine: dict = LAPTOP, quick: bool = False) -> dict:
    return {
        "commit": commit,
        "date": date,
        "machine": machine,
        "load_average_at_start": [0.5, 0.4, 0.3],
        "quick": quick,
    }


def test_one_run_names_its_commit_dates_and_machine():
    line = report.first_line(
        {
            "dhcp_storm.json": stamp("c0ffee", "2026-11-29T10:00:00+00:00"),
            "slicer.json": stamp("c0ffee", "2026-11-29T11:30:00+00:00"),
            "agent.json": stamp("c0ffee", "2026-11-29T10:45:00+00:00"),
        }
    )
    assert line == (
        "Every result below is from one `make bench` at commit `c0ffee`, its benchmarks begun between "
        "2026-11-29T10:00:00+00:00 and 2026-11-29T11:30:00+00:00, on laptop (AMD EPYC, 2 cores, 23.5 GiB)."
    )


def test_results_from_several_commits_say_which_files_come_from_which():
    line = report.first_line(
        {
            "dhcp_storm.json": stamp("c0ffee", "2026-11-29T10:00:00+00:00"),
            "flood.json": stamp("c0ffee", "2026-11-29T10:20:00+00:00"),
            "slicer.json": stamp("beef00-dirty", "2026-11-20T09:00:00+00:00"),
            "agent.json": report.stamp_of({"date": "2026-11-22T12:36:08Z", "runs": []}),  # no stamp at all
        }
    )
    assert line.startswith("**These results are not one run: they are stitched together from 3 commits**")
    assert "`beef00-dirty`: slicer.json" in line
    assert "`c0ffee`: dhcp_storm.json, flood.json" in line
    assert "no commit recorded: agent.json" in line


def test_one_commit_measured_on_two_machines_is_not_one_run():
    line = report.first_line(
        {
            "dhcp_storm.json": stamp("c0ffee", "2026-11-29T10:00:00+00:00", LAPTOP),
            "slicer.json": stamp("c0ffee", "2026-11-29T11:00:00+00:00", DESKTOP),
        }
    )
    assert line.startswith("**These results are not one run: they are stitched together from 1 commit**")
    assert "measured on 2 machines" in line
    assert "desktop (Intel Xeon, 8 cores, 64.0 GiB): slicer.json" in line
    assert "laptop (AMD EPYC, 2 cores, 23.5 GiB): dhcp_storm.json" in line


def test_the_page_opens_with_that_line(tmp_path, monkeypatch):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    for name, commit in (("dhcp_storm", "c0ffee"), ("flood", "beef00")):
        row = [f"{name} p99", "2 ms", "1 ms", "2.00x", ""]
        result = {"benchmark": name, "what": "w", "rows": [row], "stamp": stamp(commit, "2026-11-29T10:00:00+00:00")}
        (results / f"{name}.json").write_text(json.dumps(result))
    monkeypatch.setattr(report, "REPO", tmp_path)

    report.main()

    page = (tmp_path / "docs" / "PERFORMANCE.md").read_text().splitlines()
    assert page[0].startswith("**These results are not one run") and "`beef00`: flood.json" in page[0]
    assert "| flood p99 | 2 ms | 1 ms | 2.00x |  |" in page
    assert any(line.startswith("Measured 2026-11-29T10:00:00+00:00 at commit `c0ffee` on laptop") for line in page)


def test_one_commit_with_a_result_that_names_no_machine_is_not_claimed_as_one_run():
    older = report.stamp_of({"git": "c0ffee", "date": "2026-11-20T09:00:00+00:00"})  # stamped before machines were
    line = report.first_line({"dhcp_storm.json": stamp("c0ffee", "2026-11-29T10:00:00+00:00"), "qos.json": older})
    assert line.startswith("**These results are not one run") and "`c0ffee`: dhcp_storm.json, qos.json" in line
    assert "machines" not in line  # the one without a machine is not counted as a second machine


def test_a_quick_run_says_so_and_is_not_one_run_with_a_full_one():
    quick = {
        "dhcp_storm.json": stamp("c0ffee", "2026-11-29T10:00:00+00:00", quick=True),
        "slicer.json": stamp("c0ffee", "2026-11-29T10:20:00+00:00", quick=True),
    }
    line = report.first_line(quick)
    assert line.startswith("Every result below is from one `make bench QUICK=1` at commit `c0ffee`")
    assert "A QUICK run" in line
    # The same commit, one file from a full run: two runs, each named.
    line = report.first_line({**quick, "slicer.json": stamp("c0ffee", "2026-11-29T11:00:00+00:00")})
    assert line.startswith("**These results are not one run: they are stitched together from 2 runs**")
    assert "`c0ffee (QUICK=1)`: dhcp_storm.json" in line
    assert "`c0ffee`: slicer.json" in line


def test_the_collectors_measurement_becomes_its_table(tmp_path):
    """bench/run.py's flow_export runs controller/tools/export_parse.py; its result must make the page's table
    (a tool and a table that disagree would fail an hour into a bench run, not here)."""
    out = tmp_path / "flow_export_parse.json"
    tool = Path(report.REPO) / "controller/tools/export_parse.py"
    small = ["--datagrams", "300", "--rounds", "3", "--json", out]
    subprocess.run([sys.executable, tool, *small], check=True, capture_output=True, timeout=120)
    rows = report.ADAPTERS["flow_export_parse.json"](json.loads(out.read_text()))["rows"]
    parse_rows, (process, dropped) = rows[:2], rows[2:]
    for metric, fast, general, ratio, _goal in parse_rows:
        assert float(fast.split()[0]) < float(general.split()[0]), metric  # the fast path is the faster
        assert float(ratio.removesuffix("x")) < 1
    assert "% of a core" in process[1] and "10 %" in process[4]
    assert dropped[1].endswith("of 300") and dropped[4] == "0"


# What bench/memory.py reads on the router's console (MEMORY_SCRIPT): the collector is the controller's child.
CONSOLE = """unit ovs-vswitchd 52428800 active
proc ovs-vswitchd 700 40960 30720 ovs-vswitchd unix:/var/run/openvswitch/db.sock
unit ovsdb-server 8388608 active
proc ovsdb-server 650 6144 4096 ovsdb-server /etc/openvswitch/conf.db
unit homework-controller 104857600 active
proc homework-controller 900 71680 61440 /usr/lib/homework/venv/bin/python -m homework_controller --db x
proc homework-controller 950 20480 10240 python3 -m homework_controller.edge.feeds.flow_export 3 4
unit homework-hwdb 10485760 active
proc homework-hwdb 800 6144 5120 /usr/lib/homework/bin/hwdb serve
unit homework-webui 52428800 active
proc homework-webui 1000 40960 30720 /usr/lib/homework/venv/bin/python -m homework_webui
unit homework-hostapd - inactive
MemTotal:        1000000 kB
MemAvailable:     600000 kB
"""


def memory_phases(devices: list[int]) -> dict:
    import memory

    measured = memory.parse_memory(CONSOLE)
    return {"boot": {"devices": 0, "memory": measured}} | {
        f"devices_{n}": {"devices": n, "memory": measured} for n in devices
    }


def test_the_services_memory_is_counted_per_cgroup_with_the_collector_apart():
    import memory

    measured = memory.parse_memory(CONSOLE)
    services = measured["services"]
    assert services["homework-controller"]["pss_kib"] == 61440 and services["collector"]["pss_kib"] == 10240
    assert services["homework-controller"]["cgroup_kib"] == 102400  # the collector's memory is in it
    assert services["homework-hostapd"]["processes"] == 0
    assert measured["total_pss_kib"] == 30720 + 4096 + 61440 + 10240 + 5120 + 30720
    assert measured["vm_used_kib"] == 400000


def test_the_memory_table_has_a_column_per_phase_and_the_total_against_the_goal(tmp_path, monkeypatch):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    result = {"benchmark": "memory", "what": "w", "phases": memory_phases([5, 100])}
    result["stamp"] = stamp("c0ffee", "2026-11-29T10:00:00+00:00")
    (results / "memory.json").write_text(json.dumps(result))
    monkeypatch.setattr(report, "REPO", tmp_path)

    report.main()

    page = (tmp_path / "docs" / "PERFORMANCE.md").read_text().splitlines()
    assert "| service, PSS in MiB | at boot | 5 devices | 100 devices | goal |" in page
    assert "|---|---|---|---|---|" in page
    assert "| controller | 60.0 | 60.0 | 60.0 |  |" in page
    assert "| collector | 10.0 | 10.0 | 10.0 |  |" in page
    assert "| hostapd | not running | not running | not running |  |" in page
    assert "| all services together | 139.0 | 139.0 | 139.0 | <= 200 MiB with 100 devices |" in page


def test_a_memory_run_stopped_before_100_devices_shows_what_it_measured():
    phases = memory_phases([5])
    rows = report.ADAPTERS["memory.json"]({"phases": phases})
    assert rows["columns"] == ["service, PSS in MiB", "at boot", "5 devices", "goal"]
    assert all(len(row) == 4 for row in rows["rows"])
