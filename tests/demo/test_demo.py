"""`make demo`, as the README tells a newcomer: it brings up the emulated home with the router's real
services, prints its walk-through, the Guest Board answers, the laptop is let in while the phone and the
tablet wait, the walk-through's commands do what it says they do, and `make down` leaves nothing behind.
Its own run of pytest (`make e2e`, before tests/e2e): the end-to-end tests share one home for the whole
session, which this test brings up and takes down itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request

import pytest

from homenet import REPO
from homenet.home import BRIDGE, CLIENT_NS_PREFIX

HOMENET = str(REPO / ".venv/bin/homenet")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the emulated home needs root")


def make(*targets: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", *targets], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def in_device(name: str, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([HOMENET, "client", "exec", name, "--", *cmd], capture_output=True, text=True, timeout=60)


def homes_left() -> list[str]:
    """What of an emulated home is on the machine: its namespaces, its switch's bridge."""
    namespaces = subprocess.run(["ip", "-json", "netns", "list"], capture_output=True, text=True).stdout.strip()
    left = [n["name"] for n in json.loads(namespaces or "[]") if n["name"].startswith("hw-")]
    bridge = subprocess.run(["ovs-vsctl", "br-exists", BRIDGE], capture_output=True)
    return left + ([BRIDGE] if bridge.returncode == 0 else [])


def state_of(name: str) -> str:
    mac = in_device(name, "cat", "/sys/class/net/wlan0/address").stdout.strip()
    with urllib.request.urlopen(f"http://127.0.0.1:8081/ws.v1/status/{mac}", timeout=10) as answer:
        return json.load(answer)["state"]


def test_make_demo_brings_the_home_up_as_it_says_and_make_down_leaves_nothing():
    make("down")  # whatever an earlier run left
    demo = make("demo")
    try:
        assert demo.returncode == 0, demo.stderr[-3000:]
        for device in ("laptop", "phone", "tablet"):
            assert re.search(rf"^{device} +asked to join and got 10\.2\.\d+\.\d+/30$", demo.stdout, re.M), demo.stdout
            assert in_device(device, "true").returncode == 0
        assert "The emulated home is up" in demo.stdout and "http://127.0.0.1:8080" in demo.stdout
        # The setup code it prints is the one the web UI asks for.
        code = subprocess.run([HOMENET, "setup-code"], capture_output=True, text=True).stdout.strip()
        assert code and code in demo.stdout
        with urllib.request.urlopen("http://127.0.0.1:8080/", timeout=10) as board:
            assert board.status == 200 and b"<html" in board.read().lower()
        assert [state_of(d) for d in ("laptop", "phone", "tablet")] == ["permitted", "pending", "pending"]
        # The walk-through's commands: the laptop browses by name; the phone, still pending, cannot.
        page = in_device("laptop", "curl", "-s", "-m", "10", "http://www.example.test/")
        assert page.returncode == 0 and page.stdout, page.stderr
        assert in_device("phone", "curl", "-s", "-m", "3", "http://www.example.test/").returncode != 0
        assert CLIENT_NS_PREFIX + "laptop" in homes_left()
    finally:
        down = make("down")
    assert down.returncode == 0, down.stderr[-2000:]
    assert homes_left() == []
    with pytest.raises(OSError):
        urllib.request.urlopen("http://127.0.0.1:8080/", timeout=3)
