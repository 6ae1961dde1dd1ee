"""The router's services as `deploy/services.toml` defines them (read by `homework_deploy`), started as
processes with pid files."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import homework_deploy
from homework_deploy import Service

from .wait import wait_until


class HomenetError(RuntimeError):
    pass


def load(settings: dict[str, object], platform: str = "homenet") -> dict[str, Service]:
    """The services the emulated home runs (services.toml's `platforms`)."""
    try:
        return homework_deploy.load(settings, platform=platform)
    except homework_deploy.ServicesError as exc:
        raise HomenetError(str(exc)) from exc


start_order = homework_deploy.start_order


def is_ready(service: Service) -> bool:
    return homework_deploy.ready_now(service.ready)


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

    def start(self, name: str, argv, ns: str | None = None, cwd: Path | None = None, nice: int = 0) -> None:
        """Start it unless it is running (niced: services.toml's `nice`); its output goes to logs/NAME.log."""
        if self.pid(name):
            return
        self.logs.mkdir(parents=True, exist_ok=True)
        niced = ["nice", "-n", str(nice)] if nice else []  # nice(1) execs the command: the pid is its
        full = (["ip", "netns", "exec", ns] if ns else []) + niced + [str(a) for a in argv]
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                full, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd
            )
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
