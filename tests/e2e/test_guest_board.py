"""The Guest Board in Debian's Chromium against the real emulated home: the web UI's own
browser flow (webui/e2e), with devices that are real homenet clients running dhclient."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from homenet import REPO

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
        E2E_JOIN_CMD=f"{python} {HOOKS / 'join.py'}",
        E2E_CHECK_CMD=f"{python} {HOOKS / 'check.py'}",
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
