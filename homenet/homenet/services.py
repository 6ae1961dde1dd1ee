"""The router's services as `deploy/services.toml` defines them (read by `homework_deploy`), started as
processes with pid files: `RouterServices` starts them in order from the settings it is given (every
path is the caller's), `Processes` keeps any background process's pid file and log."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import homework_deploy
from homework_controller.radio import radio_settings
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


class RouterServices:
    """The router's services (hwdb, hostapd, the controller, the web UI, ...) of one platform, their
    placeholders filled from `settings` (services.toml's [settings]: every path and interface is the
    caller's), started in order, each waited for until it is ready."""

    def __init__(self, settings: dict[str, object], processes: Processes, cwd: Path | None = None):
        self.settings = settings
        self.services = load(settings)
        self.processes = processes
        self.cwd = cwd  # where their processes start (the controller finds its hostapd template from it)
        self.state, self.run = Path(str(settings["STATE"])), Path(str(settings["RUN"]))

    def start_all(self) -> None:
        for name in start_order(self.services):
            self.start(name)

    def start(self, name: str) -> None:
        """Start one service as deploy/services.toml defines it, and wait until it is ready."""
        service = self.services[name]
        self.processes.start(name, service.command, cwd=self.cwd, nice=service.nice)
        wait_until(
            f"{name} to be ready",
            lambda: is_ready(service),
            service.ready_timeout_s,
            hint=lambda: self.processes.log_tail(name),
        )

    def restart(self, name: str) -> None:
        self.processes.stop(name)
        self.start(name)

    def stop_all(self) -> None:
        for name in reversed(start_order(self.services)):
            self.processes.stop(name)

    def fresh_webui(self) -> None:
        """The web UI as a household first meets it: no accounts yet, a new setup code."""
        self.processes.stop("webui")
        shutil.rmtree(self.state / "webui", ignore_errors=True)
        self.start("webui")

    # ---- what the services read, written before they start (as the image writes it at first boot)

    def render_hostapd_conf(self) -> None:
        """Real hostapd as the 802.1X authenticator on the router's LAN side (driver=wired)."""
        eap_users = self.eap_users_file()
        if not eap_users.exists():
            eap_users.write_text("# identity, EAP method, password: one device a line (homenet client add --8021x)\n")
        proc = subprocess.run(
            [
                str(self.settings["PYTHON"]),
                "-m",
                "homework_controller.radio.hostapd_conf",
                "--driver",
                "wired",
                "--interface",
                str(self.settings["HOSTAPD_IFACE"]),
                "--ctrl-dir",
                str(self.run / "hostapd"),
                "--eap-users",
                str(eap_users),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise HomenetError(f"hostapd's configuration: {proc.stderr.strip()}")
        (self.run / "hostapd.conf").write_text(proc.stdout)

    def first_radio_settings(self, guest_passphrase: str) -> None:
        """What the image writes when it first serves a radio: the world domain, a guest passphrase."""
        settings = Path(str(self.settings["RADIO_SETTINGS"]))
        if not settings.exists():
            settings.write_text(radio_settings.render(radio_settings.RadioSettings(passphrase=guest_passphrase)))
        Path(str(self.settings["UPDATES"])).mkdir(exist_ok=True)

    def eap_users_file(self) -> Path:
        return self.run / "hostapd.eap_user"

    def add_8021x_user(self, identity: str, password: str) -> None:
        """An identity hostapd's internal EAP server accepts (EAP-MD5), read again at once."""
        with self.eap_users_file().open("a") as users:
            users.write(f'"{identity}" MD5 "{password}"\n')
        pid = self.processes.pid("hostapd")
        if pid:
            os.kill(pid, signal.SIGHUP)  # hostapd re-reads its user file

    # ---- asking them

    def hwdb(self, query: str) -> list[dict]:
        """Rows of an hwdb query, as the household's tools see them."""
        proc = subprocess.run(
            [str(self.settings["HWDB_BIN"]), "query", "--server", "127.0.0.1:987", "--json", query],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise HomenetError(f"hwdb query {query!r} failed ({proc.returncode}): {proc.stderr.strip()}")
        result = json.loads(proc.stdout or "{}")
        names = [c["name"] for c in result.get("columns", [])]
        return [dict(zip(names, row, strict=True)) for row in result.get("rows", [])]

    def setup_code(self) -> str:
        """The web UI's one-time first-run code: what the router's console and label show."""
        try:
            return (self.state / "webui" / "setup-code").read_text().strip()
        except FileNotFoundError:
            raise HomenetError("no setup code: the owner account exists already (first run is done)") from None

    def status(self) -> dict[str, dict]:
        report = {}
        for name, service in self.services.items():
            pid = self.processes.pid(name)
            report[name] = {"pid": pid, "ready": bool(pid) and is_ready(service)}
        return report


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
