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
