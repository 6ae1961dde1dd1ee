"""What the web UI's browser flows (`webui/e2e/harness.mjs`: its tests and its bench) are told of the live
emulated home: where its web UI and controller answer, the first-run setup code, the hook that makes a
real device join, check, leave, copy or use, and the files the router keeps. One place, so the browser
test and `make bench` drive the same home the same way."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from .home import REPO, Home
from .wsv1 import API

WEBUI_URL = "http://127.0.0.1:8080"
OWNER, OWNER_PASSWORD = "owner", "a long household passphrase"
DEVICE_HOOK = REPO / "tests" / "e2e" / "hooks" / "device.py"


def harness_env(home: Home, screenshots: Path) -> dict[str, str]:
    """The environment for `node` running a flow against `home` (its web UI at first run: the flow becomes
    the owner with the setup code); screenshots: where the flow's pictures go."""
    python = shlex.quote(sys.executable)
    return dict(
        os.environ,
        WEBUI_URL=WEBUI_URL,
        E2E_USER=OWNER,
        E2E_PASSWORD=OWNER_PASSWORD,
        E2E_SETUP_CODE=home.setup_code(),
        E2E_DEVICE_CMD=f"{python} {DEVICE_HOOK}",
        E2E_CONTROLLER_URL=API.removesuffix("/ws.v1"),
        E2E_AGENT_KEY_FILE=str(home.run_dir / "hwdb" / "agent.key"),
        E2E_RADIO_SETTINGS=str(home.run_dir / "radio.conf"),
        E2E_UPDATE_DIR=str(home.run_dir / "updates"),
        E2E_HWDB_QUERY_CMD=f'{python} -m homenet router exec -- hwdb query --json "$E2E_QUERY"',
        E2E_HWDB_RESTART_CMD=f"{python} -m homenet restart hwdb",
        E2E_SCREENSHOT_DIR=str(screenshots),
        PYTHON=sys.executable,
    )
