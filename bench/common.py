"""What every benchmark shares: running commands, summarising samples, writing results, the emulated home."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from homenet import Home

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent  # the checkout measured (and stamped): this one, wherever the venv's homenet comes from
RESULTS = BENCH / "results"
PY = sys.executable


def sh(*cmd, check=True, timeout=300, input=None):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def summary(samples_s: list[float]) -> dict:
    ms = sorted(s * 1000 for s in samples_s)
    if not ms:
        return {"n": 0}
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 3),
        "p99_ms": round(p99, 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "max_ms": round(ms[-1], 3),
    }


# What a run writes, relative to the repository (a stamp's "-dirty" is about anything else).
QOS_PLOT = "docs/qos-call-delay.png"
WRITTEN = ("bench/results", "docs/PERFORMANCE.md", QOS_PLOT)


def commit() -> str:
    """HEAD's commit, with "-dirty" if a tracked file differs from it (the results and the page a run writes
    do not count: they are what it makes, not what it measures)."""
    head = sh("git", "-C", REPO, "rev-parse", "HEAD", check=False).strip() or "unknown"
    measured = [".", *(f":(exclude){path}" for path in WRITTEN)]
    changed = subprocess.run(["git", "-C", REPO, "diff", "--quiet", "HEAD", "--", *measured]).returncode
    return f"{head}-dirty" if changed else head


def provenance(quick: bool = False) -> dict:
    """The stamp every result carries: the commit measured, when, on what machine, how busy the machine
    was as the benchmark began (the load average over 1, 5 and 15 minutes), and whether it was the small
    run (`make bench QUICK=1`, a check before submitting, fewer samples)."""
    return {
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "quick": quick,
    }


def machine() -> dict:
    """The host's name, the processor's model, its cores and the memory."""
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "unknown")
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
    return {
        "hostname": socket.gethostname(),
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(kib / 2**20, 1),
    }


def run_stamped(benchmark: Callable[[], None], quick: bool = False) -> list[Path]:
    """Run a benchmark and stamp every result file it wrote (itself, or a component's own bench it ran) with
    the provenance taken as it began, under the key "stamp": the one place results are stamped. Returns them."""

    def written() -> dict[Path, int]:
        return {path: path.stat().st_mtime_ns for path in RESULTS.glob("*.json")}

    began, before = provenance(quick), written()
    benchmark()
    paths = sorted(path for path, mtime in written().items() if before.get(path) != mtime)
    for path in paths:
        path.write_text(json.dumps({**json.loads(path.read_text()), "stamp": began}, indent=2) + "\n")
    return paths


@dataclass
class LockHold:
    ms: float = 0.0
    by: str = ""  # the thread and the function that held it


@contextlib.contextmanager
def longest_lock_hold(home: Home) -> Iterator[LockHold]:
    """The controller lock's longest hold while the block runs (`hold.ms`, `hold.by` once it ends): the block
    is a phase of its own, started afresh (ws.v1 `counters-phase`), every hold in it counted."""
    status, started = home.api("POST", "counters-phase")
    if status != 200:
        raise RuntimeError(f"counters-phase: {status} {started}")
    hold = LockHold()
    yield hold
    counters = home.api("GET", "counters")[1]
    if counters["lock_phase_started"] != started["lock_phase_started"]:
        raise RuntimeError("another phase was started while this one ran: its longest hold is not this phase's")
    hold.ms, hold.by = counters["lock_phase_max_hold_ms"], counters["lock_phase_max_hold_by"]


def write_result(name: str, result: dict) -> None:
    result = {"benchmark": name, **result}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["rows"], indent=1))


# ---- the emulated home ----------------------------------------------------------------------------


def homenet_up() -> Home:
    home = Home()
    home.down()
    home.up()
    return home


def add_client(home: Home, name: str, permit: bool = False) -> str:
    """A device joins (and, permitted, renews into its hour-long lease); returns its address."""
    home.add(name)
    address = home.dhcp(name)
    if permit:
        home.permit(name)
        address = home.dhcp(name)
    return address.split("/")[0]


def in_client(home: Home, name: str, *cmd, timeout=300) -> str:
    return home.exec(name, *cmd, timeout=timeout).stdout


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"


def page_times(home: Home, n: int, failures: list) -> list[float]:
    """The victim device fetches the emulated internet's page n times: seconds each (a failure is the
    5 s time-out, its error kept in failures)."""
    times = []
    for _ in range(n):
        proc = home.exec(
            "victim",
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-m",
            "5",
            "-w",
            "%{time_total} %{http_code}",
            "http://www.example.test/",
            check=False,
            timeout=30,
        )
        seconds, code = proc.stdout.split()[-2:]
        if code != "200":
            failures.append(proc.stderr.strip())
        times.append(float(seconds) if code == "200" else 5.0)  # a failed fetch counts as the time-out
    return times
