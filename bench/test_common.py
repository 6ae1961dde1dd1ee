"""Every result make bench writes carries one stamp, taken as its benchmark began (bench/common.py)."""

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import common


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout.strip()


def a_checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "bench" / "results").mkdir(parents=True)
    (repo / "docs").mkdir()
    for name in ("controller.py", "bench/results/old.json", "docs/PERFORMANCE.md", common.QOS_PLOT):
        (repo / name).write_text("{}\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return repo


def test_the_commit_is_dirty_when_measured_code_differs_but_not_when_only_results_do(tmp_path, monkeypatch):
    repo = a_checkout(tmp_path)
    monkeypatch.setattr(common, "REPO", repo)
    head = git(repo, "rev-parse", "HEAD")
    (repo / "bench/results/old.json").write_text('{"new": 1}\n')
    (repo / "docs/PERFORMANCE.md").write_text("a new page\n")
    (repo / common.QOS_PLOT).write_text("a new plot\n")  # the qos benchmark's, written before later ones begin
    assert common.commit() == head  # what a run writes is not what it measures
    (repo / "controller.py").write_text("changed = True\n")
    assert common.commit() == f"{head}-dirty"


def test_every_file_a_benchmark_wrote_is_stamped_as_it_began_and_no_other(tmp_path, monkeypatch):
    repo = a_checkout(tmp_path)
    results = repo / "bench" / "results"
    monkeypatch.setattr(common, "REPO", repo)
    monkeypatch.setattr(common, "RESULTS", results)
    (results / "untouched.json").write_text('{"rows": []}\n')
    os.utime(results / "untouched.json", ns=(0, 0))
    (results / "rewritten.json").write_text('{"rows": ["old"]}\n')
    os.utime(results / "rewritten.json", ns=(0, 0))

    def benchmark() -> None:  # as a component's own bench: its own format, written by another program
        (results / "rewritten.json").write_text('{"rows": ["new"]}\n')
        (results / "new.json").write_text('{"date": "its own", "rows": [1]}\n')

    written = common.run_stamped(benchmark)

    assert written == [results / "new.json", results / "rewritten.json"]
    assert "stamp" not in json.loads((results / "untouched.json").read_text())
    for path in written:
        result = json.loads(path.read_text())
        stamp = result["stamp"]
        assert re.fullmatch(r"[0-9a-f]{40}", stamp["commit"]) and stamp["commit"] == git(repo, "rev-parse", "HEAD")
        assert stamp["machine"]["hostname"] == socket.gethostname()
        assert stamp["machine"]["cores"] == os.cpu_count() and stamp["machine"]["cpu"]
        assert len(stamp["load_average_at_start"]) == 3
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", stamp["date"])
    assert json.loads((results / "new.json").read_text())["date"] == "its own"  # its own fields are kept
