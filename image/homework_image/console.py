"""homework-console: once the web UI is up, say on the console which version runs and, while
the router has no owner, the one-time setup code the first-run page asks for."""

from __future__ import annotations

import sys
from pathlib import Path

from . import LABEL_SETUP_CODE, ROUTER_LAN_IP, STATE, VERSION_FILE
from .boot import running_slot

GENERATED_SETUP_CODE = STATE / "webui" / "setup-code"  # the web UI's own, deleted once an owner exists


def banner(version: str, slot: str, generated_code: str | None, label_code: str | None) -> str:
    lines = [f"Homework router {version} (slot {slot.upper()}): web UI at http://{ROUTER_LAN_IP}:8080/"]
    if label_code:
        # Kept for the box's life (it is on the label), so the console cannot tell whether it is spent.
        lines.append(f"Setup code (also on the box's label), asked for until there is an owner:  {label_code}")
    elif generated_code:
        lines.append(f"First run: the setup code is  {generated_code}")
    else:
        lines.append("First run is done: the owner signs in on the web UI.")
    return "\n".join(lines)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def main() -> int:
    with open("/proc/cmdline") as f:
        slot = running_slot(f.read())
    print(
        banner(VERSION_FILE.read_text().strip(), slot, _read(GENERATED_SETUP_CODE), _read(LABEL_SETUP_CODE)), flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
