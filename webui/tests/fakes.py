"""Test doubles and a stand-alone stack: a fake controller speaking ws.v1, a real hwdb, and a
real HTTP test server for the latency-under-load check.

The fake controller plays the real one's part towards hwdb too: when told that a device
asks to join (POST /fake/join) it records the device as pending and inserts the
`new-device` Events row, as the controller does.

    python tests/fakes.py --webui-port 8090     # hwdb + fake controller + webui, for e2e/bench
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import ThreadingMixIn
from urllib.parse import parse_qs, urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from homework_controller import allowances, authority, portal, schedules
from homework_controller.api import make_app
from homework_controller.errors import ApiError as ControllerApiError
from homework_controller.errors import Conflict, DeviceBlocked, NotConfigured, UnknownDevice
from homework_controller.model import normalize_mac
from homework_controller.operations import BY_CALL
from homework_controller.radio_settings import RadioSettings, RadioSettingsFile, render
from hwdb_client import HwdbClient, HwdbError, default_binary

HERE = os.path.dirname(os.path.abspath(__file__))
# The controller's: no 0/o/1/l/i, so a passphrase read off a screen is typed right.
PASSPHRASE_ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"


def free_port(kind=socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HwdbServer:
    """A real `hwdb serve` on a free UDP port; restartable with the same database file."""

    def __init__(self, db_path: str):
        self.binary = default_binary()
        if not self.binary:
            raise RuntimeError("no hwdb binary: run make -C hwdb build (or set HWDB_BIN)")
        self.db_path, self.port, self.proc = db_path, free_port(socket.SOCK_DGRAM), None

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--db", self.db_path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with HwdbClient("127.0.0.1", self.port, timeout=0.5, max_tries=2) as c:
                    c.query("show tables")
                return self
            except (HwdbError, OSError):  # not listening yet
                time.sleep(0.05)
        raise RuntimeError("hwdb did not start")

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(5)
            self.proc = None

    def query(self, text):
        with HwdbClient("127.0.0.1", self.port, timeout=3) as c:
            return c.query(text)


class _ServedByAThread:
    """A fake's loopback HTTP server, serving from a thread of its own between start() and stop()."""

    def _serve(self, server) -> None:
        self.server = server
        self.port = server.server_address[1]
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class SpeedTestServer(_ServedByAThread):
    """The emulated internet's side of the latency check, for real: `GET /bulk?bytes=N`
    streams N bytes, `POST /sink` reads and discards its body. Both are paced to `kbit`
    (a line rate), so a test moves a known amount rather than burning the machine's CPU
    on loopback."""

    BLOCK = 16 * 1024

    def __init__(self, kbit: int = 20000):
        self.kbit = kbit
        self.hits: dict[str, int] = {"bulk": 0, "sink": 0}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 (http.server's name)
                url = urlsplit(self.path)
                if url.path != "/bulk":
                    return self._reply(404, b"not found\n")
                server.hits["bulk"] += 1
                nbytes = int(parse_qs(url.query).get("bytes", ["10000000"])[0])
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(nbytes))
                self.end_headers()
                block = bytes(server.BLOCK)
                try:
                    for sent in server.paced(nbytes):
                        self.wfile.write(block[:sent])
                except OSError:  # the check stops reading when its time is up
                    pass

            def do_POST(self):  # noqa: N802
                if self.path != "/sink":
                    return self._reply(404, b"not found\n")
                server.hits["sink"] += 1
                try:
                    for size in server.paced(int(self.headers.get("Content-Length", "0"))):
                        if not self.rfile.read(size):
                            return
                except OSError:
                    return
                self._reply(200, b"ok\n")

            def _reply(self, status: int, body: bytes):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._serve(ThreadingHTTPServer(("127.0.0.1", 0), Handler))  # its threads are daemons

    def paced(self, nbytes: int):
        """Block sizes adding up to nbytes, yielded no faster than the line rate."""
        start, done = time.monotonic(), 0
        while done < nbytes:
            size = min(self.BLOCK, nbytes - done)
            yield size
            done += size
            ahead = done * 8 / 1000 / self.kbit - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)


def _escape_qr(text: str) -> str:
    return "".join("\\" + ch if ch in '\\;,:"' else ch for ch in text)


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class FakeController(_ServedByAThread):
    def __init__(self, hwdb_port: int | None = None, radio_settings: str = ""):
        self.devices: dict[str, dict] = {}
        self.qos: dict | None = None  # what the QoS work reports in health, once it does
        self.apps: list[dict] = []  # the router's app table: [{app, priority, set_by}]
        self.wifi_ssid = "Home Wi-Fi"  # "" as without --wifi-ssid: own passphrases answer 501
        self.wifi_keys: dict[str, dict] = {}  # mac -> {keyid, passphrase, created}
        self.clone_suspected: dict[str, dict] = {}  # mac -> {at, differs}
        self.portal_codes = portal.Portal(portal.keyed_codes(secrets.token_bytes(16)))  # as the controller makes them
        self.paused: set[str] = set()
        self.away: set[str] = set()  # decided devices whose lease ran out
        # Bedtimes and allowances, checked by the controller's own parsers, so bad input is refused alike.
        self.paused_until: dict[str, str | None] = {}  # mac -> ISO time (None: until resumed)
        self.schedules: dict[str, str] = {}
        self.allowances: dict[str, allowances.Allowance] = {}
        self.usage: dict[str, allowances.DayUsage] = {}  # a device's MAC or a shared allowance's name -> use
        self.shared: dict[str, allowances.Allowance] = {}  # a shared allowance's name -> its amount
        self.sharing: dict[str, str] = {}  # a device's MAC -> the shared allowance it counts against
        self.household = {"time_zone": "UTC", "reset_time": "04:00"}
        # The radio's settings file, read, checked and written by the controller's own code ("": no radio, 501).
        self.radio = RadioSettingsFile(radio_settings)
        self.calls: list[tuple[str, str]] = []
        self.route_owners: dict[str, str] = {}  # a route's prefix -> the device whose it is
        self.hwdb_port = hwdb_port
        self.next_subnet = 1
        self.lock = threading.Lock()
        self.ws_v1 = make_app(self.call)
        self._serve(make_server("127.0.0.1", 0, self.app, server_class=_Threading, handler_class=_Quiet))

    def add(self, mac, state="pending", hostname="", name="", event=True) -> dict:
        with self.lock:
            n = self.next_subnet
            self.next_subnet += 1
            now = time.time()
            net = f"10.2.{n * 4 // 256}.{n * 4 % 256}"
            dev = {
                "mac": mac,
                "state": state,
                "ip": f"10.2.{n * 4 // 256}.{n * 4 % 256 + 2}",
                "gateway": f"10.2.{n * 4 // 256}.{n * 4 % 256 + 1}",
                "subnet": f"{net}/30",
                "hostname": hostname,
                "vendor_class": "",
                "name": name,
                "first_seen": now,
                "last_seen": now,
                "lease_expires": now + 30,
                "lease_seconds_left": 30,
            }
            self.devices[mac] = dev
        if event and self.hwdb_port:
            with HwdbClient("127.0.0.1", self.hwdb_port, timeout=3) as c:
                # The controller's wording (dhcp.py), which names the device.
                said = f"{hostname or 'unnamed device'} ({mac}) asks to join".replace("'", "''")
                c.query(f"insert into Events values ('new-device', '{mac}', '{said}')")
        return dev

    def suspect_clone(self, mac: str, differs: str) -> None:
        """What the controller does when a second DHCP client uses a device's MAC."""
        with self.lock:
            self.clone_suspected[mac] = {"at": time.time(), "differs": [differs]}
        if self.hwdb_port:
            name = self.devices[mac]["name"] or self.devices[mac]["hostname"] or mac
            message = f"{name}: its address {mac} is being used by another device too ({differs})"
            with HwdbClient("127.0.0.1", self.hwdb_port, timeout=3) as c:
                c.query(f"insert into Events values ('mac-clone', '{mac}', '{message.replace(chr(39), chr(39) * 2)}')")

    def _move(self, old: str, new: str) -> None:
        with self.lock:
            device = self.devices.pop(old)
            earlier = [*device.get("earlier_macs", []), old]
            self.devices[new] = {**device, "mac": new, "earlier_macs": earlier}
            self.away.discard(old)

    def looks_like(self, mac: str) -> dict | None:
        """The controller's offer (`lookalikes.py`): the one away permitted device with a pending one's DHCP
        name (the fake's devices have no other DHCP fields: their whole client is taken to match)."""
        device = self.devices.get(mac)
        if device is None:
            return None
        alike = [
            d
            for m, d in self.devices.items()
            if m in self.away and d["state"] == "permitted" and d["hostname"] == device["hostname"]
        ]
        if device["state"] != "pending" or not device["hostname"] or len(alike) != 1:
            return None
        label = alike[0]["name"] or alike[0]["hostname"]
        return {"mac": alike[0]["mac"], "label": label, "matched": ["host name", "requested options"]}

    def status_of(self, mac: str) -> dict:
        key = self.wifi_keys.get(mac)
        return {
            **self.devices[mac],
            "looks_like": self.looks_like(mac),
            "resembles": None,
            "clone_suspected": self.clone_suspected.get(mac),
            **self.held_status(mac),
            "schedule": self.schedules.get(mac, ""),
            "allowance": self.allowance_of(mac),
            "shared_allowance": self.shared_of(self.sharing[mac]) if mac in self.sharing else None,
            "wifi_key": {"keyid": key["keyid"], "created": key["created"]} if key else None,
            **self.portal_codes.status_of(mac),
        }

    def held_status(self, mac: str) -> dict:
        allowance = self.allowance_of(mac)
        shared = self.shared_of(self.sharing[mac]) if mac in self.sharing else None
        if mac in self.paused:
            return {"paused": True, "paused_why": "paused", "paused_until": self.paused_until.get(mac)}
        if shared and shared["used_up"]:
            allowance = shared
        if allowance and allowance["used_up"]:
            return {"paused": True, "paused_why": "allowance", "paused_until": allowance["resets_at"]}
        return {"paused": False, "paused_why": None, "paused_until": None}

    def allowance_of(self, mac: str) -> dict | None:
        if mac not in self.allowances:
            return None
        usage = self.usage.setdefault(mac, allowances.DayUsage(0.0))
        return dict(allowances.standing(self.allowances[mac], usage), resets_at="2030-01-02T04:00:00+00:00")

    def shared_of(self, name: str) -> dict:
        usage = self.usage.setdefault(name, allowances.DayUsage(0.0))
        standing = allowances.standing(self.shared[name], usage)
        devices = sorted(m for m, n in self.sharing.items() if n == name)
        return dict(standing, resets_at="2030-01-02T04:00:00+00:00", name=name, devices=devices)

    def wifi_key_answer(self, mac: str) -> dict:
        key = self.wifi_keys[mac]
        return {
            "mac": mac,
            "keyid": key["keyid"],
            "ssid": self.wifi_ssid,
            "passphrase": key["passphrase"],
            "qr": f"WIFI:T:WPA;S:{_escape_qr(self.wifi_ssid)};P:{_escape_qr(key['passphrase'])};;",
            "created": key["created"],
        }

    def app(self, environ, start_response):
        if not environ["PATH_INFO"].startswith("/fake/"):
            return self.ws_v1(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        status, body = self.fake(environ["PATH_INFO"], json.loads(environ["wsgi.input"].read(length) or b"{}"))
        data = json.dumps(body).encode()
        start_response(f"{status} X", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def fake(self, path: str, body: dict) -> tuple[int, object]:
        """What a test does to the fake home (a device joins, a clone appears) or asks of it."""
        if path == "/fake/join":
            return 200, self.add(
                body["mac"], body.get("state", "pending"), body.get("hostname", ""), event=body.get("event", True)
            )
        if path == "/fake/calls":
            return 200, self.calls
        if path == "/fake/clone":
            self.suspect_clone(body["mac"], body.get("differs", "host name 'phone' -> 'intruder'"))
            return 200, self.status_of(body["mac"])
        if path == "/fake/usage":  # what a device (or a shared allowance) used today, as its allowance counts
            usage = self.usage.setdefault(body.get("shared") or body["mac"], allowances.DayUsage(0.0))
            usage.bytes = usage.minutes = int(body["used"])
            return 200, self.shared_of(body["shared"]) if "shared" in body else self.status_of(body["mac"])
        if path == "/fake/move":  # the device joined with its own passphrase under a new MAC (`Joining._moved`)
            self._move(body["mac"], body["to"])
            return 200, self.status_of(body["to"])
        if path == "/fake/away":  # the device's lease ran out: a lookalike newcomer may be it
            self.away.add(body["mac"])
            return 200, self.status_of(body["mac"])
        if path == "/fake/qos":
            self.qos = body or None
            return 200, {"qos": self.qos}
        return 404, {"error": "no such fake"}

    # ws.v1 itself is the controller's own routing (api.make_app over operations.OPERATIONS): its
    # paths, verbs, arguments and refusals cannot drift from the real one. Who may do what is the
    # controller's own table too (authority.refusal, on the target's states as the fake knows them).
    # Each operation is answered by the method of the router's name below; one the fake lacks
    # answers 501, as a router without that feature does.

    def call(self, method: str, *args, role: str = authority.OWNER):
        op = BY_CALL[method]
        why = authority.refusal(role, op.name, self.target_states(op, args))
        if why is not None:
            raise authority.Forbidden(why)  # refused: not performed, so not among the calls
        self.calls.append((op.name, "/".join(args[: len(op.path)])))
        answer = getattr(self, f"ws_{method}", None)
        if answer is None:
            raise NotConfigured(f"{op.name} is not implemented by the fake controller")
        return answer(*args)

    def target_states(self, op, args) -> frozenset[str]:
        """The target's states (`authority.target_states`) as the fake knows them (no bedtimes)."""
        if not op.path or op.path[0] != "mac" or not args:
            return frozenset()
        mac = normalize_mac(args[-1] if op.name == "merge" else args[0])
        if mac not in self.devices:
            return frozenset()
        held = self.held_status(mac)["paused_why"]
        offered = op.name == "merge" and (self.looks_like(normalize_mac(args[0])) or {}).get("mac") == mac
        return frozenset({self.devices[mac]["state"], *([held] if held else []), *(["offered"] if offered else [])})

    def _known(self, mac: str) -> str:
        mac = normalize_mac(mac)
        if mac not in self.devices:
            raise UnknownDevice(f"unknown device {mac}")
        return mac

    def ws_status(self, mac: str | None = None):
        if mac is None:
            return [self.status_of(m) for m in list(self.devices)]
        return self.status_of(self._known(mac))

    def _decide(self, mac: str, state: str, lifts_blacklist: bool) -> dict:
        mac = self._known(mac)
        if not lifts_blacklist and self.devices[mac]["state"] == "blacklisted":
            # The controller's own rule: only lifting the blacklist (whitelist) undoes it.
            raise DeviceBlocked(f"{mac} is blacklisted: its blacklist must be lifted first")
        self.devices[mac]["state"] = state
        self.clone_suspected.pop(mac, None)  # any decision is the household's "I have seen it"
        return self.status_of(mac)

    def ws_merge(self, mac, into):
        mac, into = self._known(mac), self._known(into)
        if (self.looks_like(mac) or {}).get("mac") != into:  # only into the device offered (`Joining.merge`)
            raise Conflict(f"{mac} was not offered as {into}: only the device it looks like is merged")
        with self.lock:
            del self.devices[mac]
        self._move(into, mac)
        return self.status_of(mac)

    def ws_permit(self, mac):
        return self._decide(mac, "permitted", False)

    def ws_deny(self, mac):
        return self._decide(mac, "denied", False)

    def ws_whitelist(self, mac):
        return self._decide(mac, "permitted", True)

    def ws_blacklist(self, mac):
        return self._decide(mac, "blacklisted", True)

    def ws_give_route(self, mac, prefix):
        mac = self._known(mac)
        self.route_owners[prefix] = mac
        return self.status_of(mac)

    def ws_rename(self, mac, name):
        mac = self._known(mac)
        self.devices[mac]["name"] = name
        return self.status_of(mac)

    def ws_pause(self, mac):
        mac = self._known(mac)
        self.paused.add(mac)
        return self.status_of(mac)

    def ws_resume(self, mac):
        mac = self._known(mac)
        self.paused.discard(mac)
        self.paused_until.pop(mac, None)
        return self.status_of(mac)

    def ws_pause_for(self, mac, duration):
        mac = self._known(mac)
        if duration == "tomorrow":
            until = time.time() + 12 * 3600
        else:
            try:
                kind, minutes = allowances.parse_amount(duration if duration[-1:].isalpha() else f"{duration} min")
            except allowances.BadAllowance:
                kind, minutes = "", 0
            if kind != "minutes":
                raise ControllerApiError(f"{duration!r}: pause for minutes ('30 min', '1 h') or until 'tomorrow'")
            until = time.time() + minutes * 60
        self.paused.add(mac)
        self.paused_until[mac] = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(until))
        return self.status_of(mac)

    def ws_set_schedule(self, mac, windows):
        mac = self._known(mac)
        try:
            self.schedules[mac] = schedules.text(schedules.parse(windows))
        except schedules.BadSchedule as exc:
            raise ControllerApiError(str(exc)) from None
        return self.status_of(mac)

    def ws_set_allowance(self, mac, amount):
        mac = self._known(mac)
        if not amount.strip():
            self.allowances.pop(mac, None)
            return self.status_of(mac)
        try:
            self.allowances[mac] = allowances.Allowance(*allowances.parse_amount(amount))
        except allowances.BadAllowance as exc:
            raise ControllerApiError(str(exc)) from None
        return self.status_of(mac)

    def ws_grant_bonus(self, mac, amount):
        mac = self._known(mac)
        try:
            kind, more = allowances.parse_amount(amount)
        except allowances.BadAllowance as exc:
            raise ControllerApiError(str(exc)) from None
        if mac not in self.allowances or self.allowances[mac].kind != kind:
            raise ControllerApiError("this device has no allowance of that kind to add to")
        self.usage.setdefault(mac, allowances.DayUsage(0.0)).bonus += more
        return self.status_of(mac)

    def ws_shared_allowances(self, name: str | None = None):
        if name is None:
            return [self.shared_of(n) for n in sorted(self.shared)]
        if name not in self.shared:
            raise UnknownDevice(f"no shared allowance {name!r}")
        return self.shared_of(name)

    def ws_set_shared_allowance(self, name, amount):
        if not amount.strip():
            self.shared.pop(name, None)
            self.sharing = {m: n for m, n in self.sharing.items() if n != name}
            return None
        try:
            self.shared[name] = allowances.Allowance(*allowances.parse_amount(amount))
        except allowances.BadAllowance as exc:
            raise ControllerApiError(str(exc)) from None
        return self.shared_of(name)

    def ws_share_allowance(self, name, macs):
        if name not in self.shared:
            raise UnknownDevice(f"no shared allowance {name!r}: set its amount first")
        self.sharing = {m: n for m, n in self.sharing.items() if n != name}
        self.sharing |= {normalize_mac(m): name for m in macs.split(",") if m and normalize_mac(m) in self.devices}
        return self.shared_of(name)

    def ws_grant_shared_bonus(self, name, amount):
        kind, more = allowances.parse_amount(amount)
        if name not in self.shared or self.shared[name].kind != kind:
            raise ControllerApiError("no shared allowance of that kind to add to")
        self.usage.setdefault(name, allowances.DayUsage(0.0)).bonus += more
        return self.shared_of(name)

    def ws_household_time(self):
        return dict(self.household)

    def ws_set_time_zone(self, zone):
        try:
            schedules.zone(zone)
        except schedules.BadSchedule as exc:
            raise ControllerApiError(str(exc)) from None
        self.household["time_zone"] = zone
        return dict(self.household)

    def ws_set_reset_time(self, at):
        try:
            self.household["reset_time"] = f"{schedules.clock_time(at):%H:%M}"
        except schedules.BadSchedule as exc:
            raise ControllerApiError(str(exc)) from None
        return dict(self.household)

    def ws_issue_wifi_key(self, mac):
        mac = self._known(mac)
        if not self.wifi_ssid:
            raise NotConfigured("this router has no Wi-Fi network configured (--wifi-ssid)")
        if self.devices[mac]["state"] != "permitted":
            raise ControllerApiError(
                f"{mac} is {self.devices[mac]['state']}: only a permitted device gets its own passphrase"
            )
        passphrase = "-".join("".join(secrets.choice(PASSPHRASE_ALPHABET) for _ in range(4)) for _ in range(5))
        self.wifi_keys[mac] = {"keyid": "dev-" + mac.replace(":", ""), "passphrase": passphrase, "created": time.time()}
        return {**self.wifi_key_answer(mac), "applied": True, "note": ""}

    def _own_key(self, mac: str) -> str:
        mac = normalize_mac(mac)
        if mac not in self.wifi_keys:
            raise UnknownDevice(f"{mac} has no passphrase of its own")
        return mac

    def ws_wifi_key_of(self, mac):
        return self.wifi_key_answer(self._own_key(mac))

    def ws_revoke_wifi_key(self, mac):
        mac = self._own_key(mac)
        del self.wifi_keys[mac]
        return {"mac": mac, "revoked": True, "applied": True, "note": ""}

    def ws_portal_of(self, ip):
        """The controller's own view of the device at the address (`portal.view`)."""
        for mac, dev in self.devices.items():
            if dev["ip"] == ip:
                return portal.view(self.status_of(mac))
        raise UnknownDevice(f"no device has the address {ip!r}")

    def ws_radio_settings(self):
        return self.radio.radio_settings()

    def ws_set_radio_settings(self, changes):
        return self.radio.set_radio_settings(changes)

    def ws_app_priorities(self):
        return self.apps

    def ws_counters(self):
        return {"packet_in": 0}

    def ws_health(self):
        return {"switch_ready": True, "devices": len(self.devices), **({"qos": self.qos} if self.qos else {})}


def main():
    p = argparse.ArgumentParser(description="hwdb + fake controller + webui, for browser tests and bench")
    p.add_argument("--webui-port", type=int, default=8090)
    p.add_argument("--ready-file", help="write the stack's addresses here as JSON once it serves")
    p.add_argument("--latency-seconds", type=float, default=2.0, help="the latency check's load phase")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="webui-stack-")
    hwdb = HwdbServer(os.path.join(tmp, "hwdb.sqlite")).start()
    # What the image makes when it first serves a radio: the world domain, a guest passphrase.
    wifi_conf = os.path.join(tmp, "wifi.conf")
    with open(wifi_conf, "w") as f:
        f.write(render(RadioSettings(passphrase="correct horse battery staple")))
    ctl = FakeController(hwdb.port, radio_settings=wifi_conf).start()
    speed = SpeedTestServer().start()
    # What hwdb makes on the router: the household's agent key.
    agent_key_file = os.path.join(tmp, "agent.key")
    with open(agent_key_file, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    webui = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "homework_webui",
            "--listen",
            f"127.0.0.1:{args.webui_port}",
            "--controller-url",
            ctl.url,
            "--hwdb",
            f"127.0.0.1:{hwdb.port}",
            "--state-dir",
            os.path.join(tmp, "state"),
            "--log-level",
            "WARNING",
            "--latency-target",
            speed.url,
            "--latency-seconds",
            str(args.latency_seconds),
            "--update-dir",
            os.path.join(tmp, "update"),
            "--agent-key-file",
            agent_key_file,
        ],
        cwd=os.path.join(HERE, ".."),
    )
    info = {
        "webui": f"http://127.0.0.1:{args.webui_port}",
        "controller": ctl.url,
        "hwdb_port": hwdb.port,
        "hwdb_bin": hwdb.binary,
        "hwdb_db": hwdb.db_path,
        "tmp": tmp,
        "setup_code_file": os.path.join(tmp, "state", "setup-code"),
        # The browser test plays the image's installer here (homework-update --spool).
        "update_dir": os.path.join(tmp, "update"),
        "agent_key_file": agent_key_file,
        "radio_settings": wifi_conf,
    }
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", args.webui_port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    if args.ready_file:
        with open(args.ready_file + ".tmp", "w") as f:
            json.dump(info, f)
        os.replace(args.ready_file + ".tmp", args.ready_file)
    print(json.dumps(info), flush=True)

    # The e2e suite restarts hwdb through SIGUSR1 to prove AppPriority survives it.
    def restart_hwdb(*_):
        hwdb.stop()
        hwdb.start()
        if args.ready_file:
            with open(args.ready_file + ".restarted", "w") as f:
                f.write(str(time.time()))

    signal.signal(signal.SIGUSR1, restart_hwdb)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        while not stop.is_set() and webui.poll() is None:
            stop.wait(0.5)
    finally:
        webui.terminate()
        webui.wait(5)
        ctl.stop()
        speed.stop()
        hwdb.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
