"""The Guest Board in Debian's Chromium against the real emulated home: the web UI's own
browser flow (webui/e2e), with devices that are real homenet clients running dhclient."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from homenet import REPO
from homenet.home import API

HOOKS = REPO / "tests" / "e2e" / "hooks"


def test_the_household_admits_and_refuses_real_devices_from_the_guest_board(home):
    # A fresh home: the browser flow becomes the owner on first visit, with the setup code the
    # web UI wrote where only the household sees it (the router's console and label).
    home.fresh_webui()
    python = shlex.quote(sys.executable)
    env = dict(
        os.environ,
        WEBUI_URL="http://127.0.0.1:8080",
        E2E_USER="owner",
        E2E_PASSWORD="a long household passphrase",
        E2E_SETUP_CODE=home.setup_code(),
        E2E_DEVICE_CMD=f"{python} {HOOKS / 'device.py'}",
        E2E_CONTROLLER_URL=API.removesuffix("/ws.v1"),
        E2E_AGENT_KEY_FILE=str(home.run_dir / "hwdb" / "agent.key"),
        E2E_RADIO_SETTINGS=str(home.run_dir / "radio.conf"),
        E2E_UPDATE_DIR=str(home.run_dir / "updates"),
        E2E_HWDB_QUERY_CMD=f'{python} -m homenet router exec -- hwdb query --json "$E2E_QUERY"',
        E2E_HWDB_RESTART_CMD=f"{python} -m homenet restart hwdb",
        E2E_SCREENSHOT_DIR=str(REPO / "test-artifacts" / "screenshots-live-home"),
        PYTHON=sys.executable,
    )
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
