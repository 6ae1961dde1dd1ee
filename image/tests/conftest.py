"""The boot stories take minutes per step, and a run cut short (CI's time limit) never reaches
pytest's summary: say why a test failed as soon as it has."""

from __future__ import annotations


def pytest_runtest_logreport(report) -> None:
    if report.failed:
        print(f"\n{report.nodeid} {report.when} FAILED:\n{report.longreprtext}", flush=True)
