"""The controller tells systemd how its start goes: what the router's Type=notify unit relies on."""

import os
import socket

import pytest

from homework_controller.edge import startup


@pytest.fixture(params=["path", "abstract"])
def manager(request, monkeypatch, tmp_path):
    """A datagram socket standing where systemd's would, named in NOTIFY_SOCKET."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        sock.bind(str(tmp_path / "notify"))
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    else:
        name = f"homework-startup-test-{os.getpid()}"
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    sock.settimeout(5)
    yield sock
    sock.close()


def states(manager) -> dict[str, str]:
    return dict(line.split("=", 1) for line in manager.recv(4096).decode().splitlines())


def test_each_phase_asks_for_time_to_reach_the_next_and_ready_comes_last(manager):
    startup.phase("os-ken imported")
    said = states(manager)
    assert said["STATUS"] == "start: os-ken imported"
    # At least a minute, however quick the start has been so far; not ready yet.
    assert int(said["EXTEND_TIMEOUT_USEC"]) >= startup.LEAST_STEP_S * 1_000_000
    assert "READY" not in said
    startup.ready("switch ready (serving DHCP)")
    assert "READY" not in states(manager)  # the phase's own message first
    said = states(manager)
    assert said["READY"] == "1" and said["STATUS"] == "switch ready (serving DHCP)"


def test_without_a_manager_nothing_is_sent_and_nothing_fails(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    startup.ready("switch ready (serving DHCP)")  # the emulated home and a shell: no systemd to tell


def test_a_manager_gone_away_is_logged_not_raised(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    startup.ready("switch ready (serving DHCP)")
    assert "cannot tell the service manager" in caplog.text
