"""homework-console: once the web UI is up, say on the console which version runs and, while
the router has no owner, the one-time setup code the first-run page asks for."""
from __future__ import annotations

import sys

from . import ROUTER_LAN_IP, STATE, VERSION_FILE
from .boot import running_slot

SETUP_CODE = STATE / "webui" / "setup-code"


def banner(version: str, slot: str, setup_code: str | None) -> str:
    lines = [f"Homework router {version} (slot {slot.upper()}): web UI at http://{ROUTER_LAN_IP}:8080/"]
    if setup_code:
        lines.append(f"First run: the setup code is  {setup_code}")
    else:
        lines.append("First run is done: the owner signs in on the web UI.")
    return "\n".join(lines)


def main() -> int:
    try:
        code: str | None = SETUP_CODE.read_text().strip()
    except FileNotFoundError:
        code = None
    with open("/proc/cmdline") as f:
        slot = running_slot(f.read())
    print(banner(VERSION_FILE.read_text().strip(), slot, code), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
