"""homework-console: once the web UI is up, say on the console which version runs and, while
the router has no owner, the one-time setup code the first-run page asks for (where the household may
also make the box an access point of their router). A box in that role says so, and how to undo it."""

from __future__ import annotations

import sys
from pathlib import Path

from . import LABEL_SETUP_CODE, ROUTER_LAN_IP, STATE, VERSION_FILE, role
from .boot import running_slot

GENERATED_SETUP_CODE = STATE / "webui" / "setup-code"  # the web UI's own, deleted once an owner exists


def banner(version: str, slot: str, generated_code: str | None, label_code: str | None) -> str:
    lines = [f"Homework router {version} (slot {slot.upper()}): web UI at http://{ROUTER_LAN_IP}:8080/"]
    if label_code:
        # Kept for the box's life (it is on the label), so the console cannot tell whether it is spent.
        lines.append(f"Setup code (also on the box's label), asked for until there is an owner:  {label_code}")
    elif generated_code:
        lines.append(f"First run: the setup code is  {generated_code}")
        lines.append(
            "  (or make this box an access point of your router on that page: with the code your router's"
            " web UI shows under Add an access point)"
        )
    else:
        lines.append("First run is done: the owner signs in on the web UI.")
    return "\n".join(lines)


def satellite_banner(version: str, slot: str, satellite: role.SatelliteRole, paired: bool) -> str:
    state = (
        "paired with the router"
        if paired
        else "pairs with the router (the code from its first-run page) once its cable is in a LAN port of the router"
    )
    return "\n".join(
        [
            f"Homework access point {version} (slot {slot.upper()}): {satellite.name!r}, serving your router's network",
            f"It {state}.",
            f"To make it a router again: rm {role.ROLE_FILE}; rm -r {role.SATELLITE_STATE}; reboot",
        ]
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def main() -> int:
    with open("/proc/cmdline") as f:
        slot = running_slot(f.read())
    satellite = role.satellite_role()
    if satellite is not None:
        paired = (role.SATELLITE_STATE / "session.json").exists()
        print(satellite_banner(VERSION_FILE.read_text().strip(), slot, satellite, paired), flush=True)
        return 0
    print(
        banner(VERSION_FILE.read_text().strip(), slot, _read(GENERATED_SETUP_CODE), _read(LABEL_SETUP_CODE)), flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
