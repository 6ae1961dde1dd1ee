"""homework-role: what this box is, the household's router or an access point of their router (a satellite,
docs/whole-home-wifi.md), chosen once at first run.

A box is a router unless its data partition has `config/satellite` (ROLE_FILE): the same image, where every
router service's unit has `ConditionPathExists=!` that file and the satellite's agent's `ConditionPathExists=`
it (homework_deploy.systemd.role_condition), `homework-network` makes a Linux bridge over the box's ports in
place of the router's switch (network.py), and the health check and the console speak of the access point.

The choice is made on the first-run page, while the box has no owner: the web UI (no privileges) leaves the
household's request in its spool (ROLE_SPOOL/request: {"role": "satellite", "code": the pairing code the
router's web UI showed, "name": how the router names it}); homework-role.path starts `homework-role take`,
as root, which writes the code (SATELLITE_STATE/code, the agent's to read and delete once paired) and then
the role file (both 0600, root's), and restarts the box in its new role.

The role file holds `key=value` lines: `name=` (how the router's web UI names the access point, default
"Access point") and `channel=` (this access point's own channel; default: the router's). To make the box a
router again: remove the file (`rm /var/lib/homework/config/satellite`, and `rm -r
/var/lib/homework/satellite`, its session with the router) and reboot, or wipe the data partition.

    homework-role take [SPOOL]     # homework-role.service: the first-run page's choice, then a reboot
    homework-role agent [...]      # homework-satellite.service: the satellite's agent, once it can reach the router
    homework-role                  # says which role the box has
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from homework_controller.radio import private_files

from . import ROUTER_LAN_IP, RUN, STATE

ROLE_FILE = STATE / "config" / "satellite"
SATELLITE_STATE = STATE / "satellite"
CODE_FILE = "code"  # in the agent's state directory
ROLE_SPOOL = RUN / "role"
REQUEST = "request"
SATELLITE_BRIDGE = "br0"
DEFAULT_NAME = "Access point"
MAX_REQUEST_BYTES = 4096
MAX_CODE_LENGTH = 64
MAX_NAME_LENGTH = 32  # as the router's web UI takes an access point's name
ROUTER_URL = f"http://{ROUTER_LAN_IP}"  # the router's web UI as every LAN device reaches it (port 80)
RETRY_S = 300  # a refused pairing is tried again this long after, or as soon as a new code is written


class RoleError(ValueError):
    pass


@dataclass(frozen=True)
class SatelliteRole:
    name: str = DEFAULT_NAME
    channel: int | None = None


def parse(text: str) -> SatelliteRole:
    """The role file's `name=` and `channel=` lines (# comments); RoleError for anything else."""
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or key not in ("name", "channel") or not value:
            raise RoleError(f"{ROLE_FILE} line {number}: expected name=TEXT or channel=NUMBER, got {raw!r}")
        found[key] = value
    name = found.get("name", DEFAULT_NAME)
    if len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise RoleError(f"{ROLE_FILE}: the name is 1 to {MAX_NAME_LENGTH} printable characters")
    channel = None
    if "channel" in found:
        if not found["channel"].isdigit() or not 1 <= int(found["channel"]) <= 196:
            raise RoleError(f"{ROLE_FILE}: channel={found['channel']} is not a channel number")
        channel = int(found["channel"])
    return SatelliteRole(name, channel)


def render(role: SatelliteRole) -> str:
    lines = ["# This box is an access point of the household's router (homework_image.role).", f"name={role.name}"]
    if role.channel is not None:
        lines.append(f"channel={role.channel}")
    return "\n".join(lines) + "\n"


def is_satellite(role_file: Path = ROLE_FILE) -> bool:
    """What systemd's conditions decide by: the file's presence, whatever it holds."""
    return role_file.exists()


def satellite_role(role_file: Path = ROLE_FILE) -> SatelliteRole | None:
    """The box's satellite role; None: it is a router. A file that cannot be read as one still makes the
    box a satellite (the units' conditions go by its presence), with the defaults and a word on stderr."""
    try:
        text = role_file.read_text()
    except FileNotFoundError:
        return None
    try:
        return parse(text)
    except RoleError as exc:
        print(f"homework-role: {exc}: the defaults are used", file=sys.stderr)
        return SatelliteRole()


def check_request(doc: object) -> tuple[str, SatelliteRole]:
    """(the pairing code, the role) from the first-run page's request; RoleError when it is not one."""
    if not isinstance(doc, dict) or doc.get("role") != "satellite":
        raise RoleError('the request is not {"role": "satellite", ...}')
    code = str(doc.get("code") or "").strip()
    if not code or len(code) > MAX_CODE_LENGTH or not code.isprintable() or any(c.isspace() for c in code):
        raise RoleError(f"the pairing code is 1 to {MAX_CODE_LENGTH} printable characters without spaces")
    name = str(doc.get("name") or "").strip() or DEFAULT_NAME
    if len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise RoleError(f"the access point's name is 1 to {MAX_NAME_LENGTH} printable characters")
    return code, SatelliteRole(name)


def _read_request(path: Path) -> bytes:
    """The spool's request, never through a link, and not a special file or a huge one."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_REQUEST_BYTES:
            raise RoleError(f"{path} is not a request")
        return os.read(fd, MAX_REQUEST_BYTES + 1)
    finally:
        os.close(fd)


def write_private(path: Path, text: str) -> None:
    """Root's alone (0600, in a directory of root's), whole or not at all, and on the disk before the next step."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    private_files.write(str(path), text)


def take(
    spool: Path = ROLE_SPOOL,
    role_file: Path = ROLE_FILE,
    satellite_state: Path = SATELLITE_STATE,
    restart: Callable[[], object] = lambda: subprocess.run(["systemctl", "--no-block", "reboot"], check=False),
) -> str:
    """The first-run page's request made the box's role: the code, then the role file (so a role never
    exists without its code), then a restart into it. A request that is not one is dropped, and said why."""
    request = spool / REQUEST
    try:
        try:
            code, role = check_request(json.loads(_read_request(request)))
        except (OSError, ValueError) as exc:  # RoleError is a ValueError, and so is bad JSON
            raise RoleError(f"the first-run page's request was not taken: {exc}") from None
    finally:
        request.unlink(missing_ok=True)
    if role_file.exists():
        return "this box is an access point already: the request was dropped"
    # A session with another router, left from an earlier time as a satellite, is not this code's.
    (satellite_state / "session.json").unlink(missing_ok=True)
    write_private(satellite_state / CODE_FILE, code + "\n")
    os.chmod(satellite_state, 0o700)
    write_private(role_file, render(role))
    restart()
    return f"this box is now an access point of the household's router ({role.name!r}): restarting"


def bridge_address(bridge: str) -> str | None:
    """The bridge's IPv4 address (its lease from the router), if it has one."""
    proc = subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", bridge], capture_output=True, text=True)
    try:
        links = json.loads(proc.stdout or "[]")
    except ValueError:
        return None
    for link in links:
        for info in link.get("addr_info", []):
            if info.get("local"):
                return str(info["local"])
    return None


def router_answers(url: str, timeout: float = 5) -> bool:
    """The router's web UI answers at all (any HTTP status): the pairing can be tried."""
    try:
        with urllib.request.urlopen(f"{url}/api/satellite/pair", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


def _code_stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_mtime_ns, info.st_size


def agent(argv: list[str], sleep: Callable[[float], None] = time.sleep) -> int:
    """The satellite's agent (homework_image.satellite), started once the box has its address on the bridge
    and the router's web UI answers; a pairing the router refused is tried again when a new code is written
    (or after RETRY_S), so a box given a spent code waits for the household, rather than fail over and over."""
    from . import satellite  # the controller's modules it needs are imported only in this role

    p = argparse.ArgumentParser(prog="homework-role agent")
    p.add_argument("--state", type=Path, default=SATELLITE_STATE)
    p.add_argument("--run", type=Path, default=RUN / "satellite")
    p.add_argument("--role-file", type=Path, default=ROLE_FILE)
    p.add_argument("--router", default=ROUTER_URL)
    p.add_argument("--bridge", default=SATELLITE_BRIDGE)
    p.add_argument("--radio", default="wlan0")
    args = p.parse_args(argv)
    role = satellite_role(args.role_file) or SatelliteRole()
    code_file = args.state / CODE_FILE
    said = set()

    def once(what: str) -> None:
        if what not in said:
            said.add(what)
            print(f"homework-role: {what}", flush=True)

    while True:
        while (address := bridge_address(args.bridge)) is None:
            once(f"waiting for an address from the router on {args.bridge}")
            sleep(1)
        while not router_answers(args.router):
            once(f"{args.bridge} has {address}; waiting for the router's web UI at {args.router}")
            sleep(2)
        stamp = _code_stamp(code_file)
        command = ["--router", args.router, "--code-file", str(code_file), "--name", role.name]
        command += ["--radio", args.radio, "--bridge", args.bridge, "--state", str(args.state), "--run", str(args.run)]
        if role.channel is not None:
            command += ["--channel", str(role.channel)]
        status = satellite.main(command)
        if status == 0:  # stopped, or removed by the household: it serves no longer
            return 0
        print(
            f"homework-role: not serving (exit {status}); trying again when a new code is written to {code_file}"
            f" or in {RETRY_S} s",
            flush=True,
        )
        waited = 0.0
        while waited < RETRY_S and _code_stamp(code_file) == stamp:
            sleep(2)
            waited += 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["agent"]:
        return agent(argv[1:])
    p = argparse.ArgumentParser(prog="homework-role", description=__doc__.split("\n\n")[0])
    p.add_argument("command", nargs="?", choices=("take", "show"), default="show")
    p.add_argument("spool", nargs="?", type=Path, default=ROLE_SPOOL)
    args = p.parse_args(argv)
    if args.command == "take":
        try:
            print(f"homework-role: {take(args.spool)}", flush=True)
        except RoleError as exc:
            print(f"homework-role: {exc}", file=sys.stderr)
            return 1
        return 0
    role = satellite_role()
    print("router" if role is None else f"satellite ({role.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
