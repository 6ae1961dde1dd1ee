"""The Guest Board in Debian's Chromium against the real emulated home: the web UI's own
browser flow (webui/e2e), with devices that are real homenet clients running dhclient."""

from __future__ import annotations

import re
import subprocess

from homenet import REPO
from homenet.browser import harness_env


def test_the_household_admits_and_refuses_real_devices_from_the_guest_board(home):
    # A fresh home: the browser flow becomes the owner on first visit, with the setup code the
    # web UI wrote where only the household sees it (the router's console and label).
    home.fresh_webui()
    env = harness_env(home, REPO / "test-artifacts" / "screenshots-live-home")
    proc = subprocess.run(
        ["node", "--test", "--test-concurrency=1", "guestboard.test.mjs"],
        cwd=REPO / "webui" / "e2e",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    # node's summary: every flow ran here, none was skipped for want of the test stack.
    summary = dict(re.findall(r"^# (tests|pass|skipped) (\d+)$", proc.stdout, re.M))
    assert int(summary["tests"]) >= 21 and summary["pass"] == summary["tests"] and summary["skipped"] == "0", summary
