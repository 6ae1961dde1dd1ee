"""The emulated home for end-to-end tests: the same `homenet` CLI a person uses."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOMENET = str(REPO / "tests" / "homenet" / "homenet")
RUN = Path(os.environ.get("HOMENET_RUN", "/run/homenet"))
API = "http://127.0.0.1:8081/ws.v1"
INTERNET_HOST = "www.example.test"
INTERNET_IP = "198.51.100.80"


def sh(*cmd, check=True, timeout=60, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


class Home:
    """Drives homenet and the controller's ws.v1 API the way a household's tools would."""

    def __init__(self):
        self.clients: list[str] = []

    def add(self, name, *options):
        sh(HOMENET, "client", "add", name, *options)
        self.clients.append(name)
        return self.mac(name)

    def remove(self, name):
        sh(HOMENET, "client", "del", name, check=False)
        if name in self.clients:
            self.clients.remove(name)

    def mac(self, name):
        return self.run(name, "cat", "/sys/class/net/wlan0/address").stdout.strip()

    def run(self, name, *cmd, check=True, timeout=60):
        return sh(HOMENET, "client", "exec", name, "--", *cmd, check=check, timeout=timeout)

    def dhcp(self, name, timeout=20):
        """Real dhclient: returns the address it configured, e.g. '10.2.0.6/30'."""
        return sh(HOMENET, "client", "dhcp", name, "--timeout", timeout, timeout=timeout + 10).stdout.strip()

    def lease_left(self, name):
        """Seconds left on the address dhclient configured (the kernel's valid_lft)."""
        out = self.run(name, "ip", "-4", "-o", "addr", "show", "dev", "wlan0").stdout
        found = re.findall(r"valid_lft (\d+)sec", out)
        if not found:
            raise AssertionError(f"{name} has no dynamic address: {out!r}")
        return int(found[0])

    def wait_for_lease_left(self, name, at_least, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.lease_left(name) >= at_least:
                return
            time.sleep(0.5)
        raise AssertionError(f"{name} never got a lease of {at_least}s or more (has {self.lease_left(name)}s)")

    def fetch(self, name, url=f"http://{INTERNET_HOST}/", timeout=5):
        return self.run(name, "curl", "-sS", "-m", timeout, "-o", "/dev/null", "-w", "%{http_code}", url,
                        check=False, timeout=timeout + 10)

    def api(self, verb, path):
        req = urllib.request.Request(f"{API}/{path}", method=verb)
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def permit(self, name):
        status, body = self.api("POST", f"permit/{self.mac(name)}")
        assert status == 200, body
        return body

    def decide(self, method, name):
        """whitelist, blacklist, permit, deny... as the household's tools call it."""
        status, body = self.api("POST", f"{method}/{self.mac(name)}")
        assert status == 200, body
        return body

    def deny(self, name):
        status, body = self.api("POST", f"deny/{self.mac(name)}")
        assert status == 200, body
        return body

    def flows(self, table):
        return sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", "br-lan", f"table={table}").stdout


@pytest.fixture(scope="session")
def homenet():
    if os.geteuid() != 0:
        pytest.skip("the emulated home needs root")
    sh(HOMENET, "down", check=False)
    sh(HOMENET, "up", timeout=180)
    yield
    logs = RUN / "logs"
    keep = REPO / "test-artifacts" / "homenet-logs"
    if logs.exists():
        keep.mkdir(parents=True, exist_ok=True)
        for log in logs.iterdir():
            (keep / log.name).write_bytes(log.read_bytes())
    sh(HOMENET, "down", check=False)


@pytest.fixture
def home(homenet):
    h = Home()
    yield h
    for name in list(h.clients):
        h.remove(name)
