"""The router's services as `deploy/services.toml` defines them, started as processes with pid files."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .wait import wait_until

SERVICES_FILE = Path(__file__).resolve().parents[3] / "deploy" / "services.toml"
_PLACEHOLDER = re.compile(r"\$\{([A-Z_]+)\}")


class HomenetError(RuntimeError):
    pass


@dataclass(frozen=True)
class Service:
    name: str
    command: tuple[str, ...]
    after: tuple[str, ...]
    ready: dict
    ready_timeout_s: float


def load(settings: dict[str, object], path: Path = SERVICES_FILE) -> dict[str, Service]:
    """Every service with its placeholders filled from `settings` (all of them must be given)."""
    spec = tomllib.loads(path.read_text())
    missing = set(spec["settings"]) - set(settings)
    if missing:
        raise HomenetError(f"settings missing for {path.name}: {', '.join(sorted(missing))}")

    def fill(value):
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda m: str(settings[m.group(1)]), value)
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    return {name: Service(name, tuple(fill(s["command"])), tuple(s.get("after", ())), fill(s.get("ready", {})),
                          float(s.get("ready_timeout_s", 30)))
            for name, s in spec["services"].items()}


def start_order(services: dict[str, Service]) -> list[str]:
    """Services ordered so that each starts after those it names in `after`."""
    order: list[str] = []

    def visit(name, path=()):
        if name in path:
            raise HomenetError(f"services start after each other in a circle: {' -> '.join(path + (name,))}")
        if name not in order:
            for before in services[name].after:
                visit(before, path + (name,))
            order.append(name)

    for name in services:
        visit(name)
    return order


def is_ready(service: Service) -> bool:
    ready = service.ready
    if "command" in ready:
        return subprocess.run(ready["command"], capture_output=True).returncode == 0
    if "path" in ready:
        return Path(ready["path"]).exists()
    if "url" in ready:
        try:
            with urllib.request.urlopen(ready["url"], timeout=1) as resp:
                if "json_field" not in ready:
                    return resp.status == 200
                return json.loads(resp.read()).get(ready["json_field"]) is True
        except (OSError, ValueError):
            return False
    return True


class Processes:
    """Background processes with pid files and logs under one directory, found again after a crash."""

    def __init__(self, run: Path):
        self.run, self.logs = run, run / "logs"

    def pid(self, name: str) -> int | None:
        try:
            pid = int((self.run / f"{name}.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def start(self, name: str, argv, ns: str | None = None, cwd: Path | None = None) -> None:
        """Start it unless it is running; its output goes to logs/NAME.log."""
        if self.pid(name):
            return
        self.logs.mkdir(parents=True, exist_ok=True)
        full = (["ip", "netns", "exec", ns] if ns else []) + [str(a) for a in argv]
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=cwd)
        (self.run / f"{name}.pid").write_text(str(proc.pid))

    def stop(self, name: str, timeout: float = 5.0) -> None:
        pid = self.pid(name)
        if pid:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                wait_until(f"{name} to stop", lambda: not pid_alive(pid), timeout, interval=0.05)
            except AssertionError:
                os.killpg(pid, signal.SIGKILL)
        (self.run / f"{name}.pid").unlink(missing_ok=True)

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.logs / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return f"--- last lines of {self.logs / (name + '.log')} ---\n" + "\n".join(text.splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not a running service
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
