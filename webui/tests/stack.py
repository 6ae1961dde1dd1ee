"""The web UI's stand-alone stack: the real controller core behind the real ws.v1 app on the controller's
fake switch, a real hwdb, and a real HTTP test server for the latency-under-load check.

`HomeOnFakeSwitch` is `HomeRouter` (the controller's policy core, as it ships: IPv6 on, flows from the
switch's export) served by the controller's own ws.v1 path (`ws_service.Ws1Service`, which the os-ken app
serves too), its effects carried out by the controller's tests' `FakeSwitch` (rules, meters) and its
events written to hwdb by the controller's own writer (`HwdbLog`), on a test clock that moves only when
a test says. What a test does to the home is an event fed to that core, never state written: a device
asks to join (DHCP DISCOVER and REQUEST, with its client's host name and options), leaves (DHCPRELEASE),
has its MAC copied (a second client's DISCOVER), moves data (the switch's counters, as the stats poll
reads them); time passes (the clock, and the router's tick).

    python tests/stack.py --webui-port 8090     # hwdb + the controller core + webui, for e2e/bench

Run as a script it needs the controller's tests' doubles on its path (PYTHONPATH=../controller/tests,
as webui/pytest.ini gives pytest, e2e/harness.mjs and the Makefile give the script).
"""

from __future__ import annotations

import argparse
import itertools
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

from dhcp_frames import frame, reply_of
from fakeoftable import FakeSwitch

from homework_controller import flows
from homework_controller.api import authority
from homework_controller.api.api import make_app
from homework_controller.api.operations import BY_NAME
from homework_controller.api.server import TimedLock
from homework_controller.api.ws_service import Ws1Service
from homework_controller.core.router import HomeRouter
from homework_controller.edge.feeds.hwdb_log import HwdbLog
from homework_controller.effects import (
    AnswerDhcp,
    AuthenticatorWord,
    Effect,
    EffectSink,
    LanAddressChange,
    LogRow,
    ResolveName,
    RuleChange,
    SendFrame,
    TellHousehold,
)
from homework_controller.errors import ApiError
from homework_controller.radio import hostapd_ctrl
from homework_controller.radio.hostapd_ctrl import Authenticator
from homework_controller.radio.radio_settings import RadioSettings, RadioSettingsFile, render
from homework_controller.store import DeviceStore
from hwdb_client import HwdbClient, HwdbError, default_binary

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port(kind=socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ChildExited(RuntimeError):
    """The server ended before it answered (its last words in the message)."""


class _ChildServer:
    """A real server run as a child process: started, asked until it answers, and stopped."""

    proc: subprocess.Popen | None = None

    def _spawn(self, argv: list[str], answers, what: str) -> None:
        """Start `argv` and return once `answers()` does without raising `OSError` (its kinds of "not yet");
        `ChildExited`, with what it said, if it ends first."""
        with tempfile.TemporaryFile() as said:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=said)
            deadline = time.time() + 10
            while time.time() < deadline:
                if (code := self.proc.poll()) is not None:
                    self.proc = None
                    said.seek(0)
                    raise ChildExited(f"{what} exited ({code}) before it answered: {said.read()[-600:].decode()}")
                try:
                    answers()
                    return
                except OSError:  # not listening yet
                    time.sleep(0.05)
            self.stop()
            said.seek(0)
            raise RuntimeError(f"{what} did not answer in 10 s: {said.read()[-600:].decode()}")

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(5)
            self.proc = None


class HwdbServer(_ChildServer):
    """A real `hwdb serve` on a free UDP port; restartable with the same database file."""

    def __init__(self, db_path: str):
        self.binary = default_binary()
        if not self.binary:
            raise RuntimeError("no hwdb binary: run make -C hwdb build (or set HWDB_BIN)")
        self.db_path, self.port, self.proc = db_path, free_port(socket.SOCK_DGRAM), None
        self.answered = False  # once it has, clients know its port: a restart keeps it

    def start(self):
        for attempt in itertools.count(1):
            try:
                self._spawn(
                    [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--db", self.db_path],
                    self._answers,
                    "hwdb",
                )
                break
            except ChildExited as exc:
                # free_port's port can be taken by another socket before hwdb binds it (a fresh clone's CI run
                # once had hwdb not start): at the first start nobody knows the port yet, so take another.
                if self.answered or attempt == 3 or "Address already in use" not in str(exc):
                    raise
                self.port = free_port(socket.SOCK_DGRAM)
        self.answered = True
        return self

    def _answers(self) -> None:
        try:
            with HwdbClient("127.0.0.1", self.port, timeout=0.5, max_tries=2) as c:
                c.query("show tables")
        except HwdbError as exc:
            raise OSError(exc) from exc

    def query(self, text):
        with HwdbClient("127.0.0.1", self.port, timeout=3) as c:
            return c.query(text)


class _ServedByAThread:
    """A loopback HTTP server, serving from a thread of its own between start() and stop()."""

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


class Hostapd(_ChildServer):
    """A real hostapd without a radio (driver=none): its control socket takes what the controller tells a
    radio (the devices' key file to read again, stations to deny), as the router's does."""

    def __init__(self, ssid: str, psk_file: str):
        self.binary = shutil.which("hostapd") or "/usr/sbin/hostapd"
        if not os.path.exists(self.binary):
            raise RuntimeError("no hostapd: install it (scripts/install-deps.sh)")
        self.dir = tempfile.mkdtemp(prefix="hapd-")  # short: a control socket's path has at most 107 bytes
        self.ctrl = os.path.join(self.dir, "homework0")
        with open(psk_file, "a"):
            pass  # hostapd reads the file at start; the controller writes it whole from then on
        self.conf = os.path.join(self.dir, "hostapd.conf")
        with open(self.conf, "w") as f:
            f.write(
                f"driver=none\ninterface=homework0\nctrl_interface={self.dir}\nssid={ssid}\n"
                f"wpa=2\nwpa_key_mgmt=WPA-PSK\nwpa_passphrase=correct horse battery staple\nwpa_psk_file={psk_file}\n"
            )

    def start(self):
        self._spawn([self.binary, self.conf], self._answers, "hostapd")
        return self

    def _answers(self) -> None:
        try:
            hostapd_ctrl.command(self.ctrl, "ping")
        except hostapd_ctrl.HostapdError as exc:
            raise OSError(exc) from exc

    def stop(self):
        super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class TestClock:
    """The controller core's clock in a test: it stands still, and moves only when the test says
    (`HomeOnFakeSwitch.advance`). It starts on the last midday UTC before now, so no run depends on the
    hour it happens at (no bedtime is on at midday) and what the board shows happened hours ago, not years."""

    def __init__(self):
        now = time.time()
        self.now = now - (now - 12 * 3600) % 86400

    def __call__(self) -> float:
        return self.now


# What a test device's DHCP client sends beside its host name: dhclient's requested options. Two devices
# with one host name thus have the same client, as a phone back under a private MAC has (`lookalikes`).
DHCP_OPTIONS = [("param_req_list", [1, 28, 2, 3, 15, 6, 119, 12, 44, 47, 26, 121, 42])]
WLAN, ROUTER_MAC = 1, "02:48:57:00:00:01"
DECIDED = {"permitted": "permit", "denied": "deny", "blacklisted": "blacklist"}  # a state, and the decision making it


class HomeOnFakeSwitch(Ws1Service, EffectSink, _ServedByAThread):
    """The controller's core (`HomeRouter`) on the controller's fake switch, serving ws.v1 by the
    controller's own path; hooks (a device joins, leaves, is copied, moves data; time passes) feed it
    events. Also reachable over HTTP under /home/ (the browser tests' hooks)."""

    def __init__(self, state_dir: str, hwdb_port: int | None = None, radio_settings: str = "", wifi_ssid="Home Wi-Fi"):
        os.makedirs(state_dir, exist_ok=True)
        self.clock = TestClock()
        self.router = HomeRouter(
            DeviceStore(os.path.join(state_dir, "controller.sqlite")), clock=self.clock, wifi_ssid=wifi_ssid
        )
        self.lock = TimedLock()
        self.switch = FakeSwitch(clock=self.clock)
        self.hwdb = HwdbLog(f"127.0.0.1:{hwdb_port}" if hwdb_port else None)
        self.radio_settings = RadioSettingsFile(radio_settings)
        # The key file of devices' own passphrases, written as the controller writes it, for a real hostapd.
        psk_file = os.path.join(state_dir, "wifi.psk")
        self.hostapd = Hostapd(wifi_ssid or "Home Wi-Fi", psk_file).start()
        self.authenticator = Authenticator(self.hostapd.ctrl, psk_file, self._wifi_keys)
        threading.Thread(target=self.authenticator.run_forever, daemon=True).start()
        self.qos: dict | None = None  # what the router's shapers report in health, once a test says they run
        self.calls: list[tuple[str, str]] = []  # ws.v1 operations performed for its HTTP clients (the web UI)
        self.dhcp_answers: list[bytes] = []
        self.counted_bytes: dict[str, int] = {}  # what each device's own rule has counted (cumulative, as OVS)
        self.clients: dict[str, list] = {}  # each device's DHCP client: what it sends when it renews
        with self.lock:
            self._apply(self.router.switch_ready(WLAN, ROUTER_MAC))
        self.switch_ready = True
        self.ws_v1 = make_app(self._called_over_http)
        self._serve(make_server("127.0.0.1", 0, self.app, server_class=_Threading, handler_class=_Quiet))

    def stop(self):
        super().stop()
        self.router.store.close()
        self.hostapd.stop()

    # ---- the edge: effects carried out, and its own answers

    def _apply(self, effects: list[Effect], *, at_once: bool = False) -> None:
        for effect in effects:
            self.carry_out(effect)

    def change_rules(self, change: RuleChange) -> None:
        self.switch.apply([change])  # rules and meters; the switch refuses what OVS would

    def answer_dhcp(self, answer: AnswerDhcp) -> None:
        self.dhcp_answers.append(answer.data)

    def log_row(self, row: LogRow) -> None:
        self.hwdb.write(row.table, row.row)

    def tell_household(self, told: TellHousehold) -> None:
        self.hwdb.write("Events", (told.kind, told.mac, told.message))

    def publish_wifi_keys(self) -> None:  # as the controller does: off the lock, which it takes
        threading.Thread(target=self.authenticator.publish_keys, daemon=True).start()

    def tell_authenticator(self, told: AuthenticatorWord) -> None:
        self.authenticator.tell(told)

    # This home has no devices' sockets, upstream resolver or interfaces to carry these to.

    def send_frame(self, frame: SendFrame) -> None:
        pass  # a frame to a device (an ARP or neighbour answer, a router advert): no device's stack to hear it

    def resolve_name(self, name: ResolveName) -> None:
        pass  # a denied name's addresses looked up ahead: no upstream resolver here

    def change_lan_addresses(self, change: LanAddressChange) -> None:
        pass  # a gateway address or route on the router's LAN interface: no interface here

    def _wifi_keys(self) -> list:
        with self.lock:
            return self.router.passphrases.all()

    def health(self) -> dict:
        return {
            "switch_ready": self.switch_ready,
            "devices": len(self.router.devices),
            "store": {"recovered": self.router.store.recovered, "write_errors": self.router.store.errors},
            **({"qos": self.qos} if self.qos else {}),
        }

    def counters(self) -> dict:
        return dict(self.router.counters, lock_max_hold_ms=round(self.lock.max_hold_s * 1000, 1))

    def _called_over_http(self, name: str, *args, role: str = authority.OWNER):
        result = self.call(name, *args, role=role)
        op = BY_NAME[name]
        self.calls.append((op.name, "/".join(map(str, args[: len(op.path)]))))
        return result

    # ---- events: what happens in the home

    def _dhcp(self, mac: str, msg_type: str, **fields) -> list[bytes]:
        """A DHCP client's message into the router, as the controller's DHCP port hands it over."""
        with self.lock:
            self.dhcp_answers = []
            self._apply(self.router.joining.on_dhcp(frame(mac, msg_type, **fields)))
            return self.dhcp_answers

    def join(self, mac: str, hostname: str = "", options: list | None = None) -> dict:
        """A device asks to join: its DHCP client's DISCOVER and REQUEST (its host name, and `options`: the
        client's own beside dhclient's requested ones); returns its status."""
        client = [*([("hostname", hostname.encode())] if hostname else []), *DHCP_OPTIONS, *(options or [])]
        self.clients[mac] = client
        [offer] = self._dhcp(mac, "discover", options=client)
        pkt, opts = reply_of(offer)
        self._dhcp(
            mac, "request", options=[("server_id", opts["server_id"]), ("requested_addr", pkt["BOOTP"].yiaddr), *client]
        )
        return self.status(mac)

    def joined(
        self, mac: str, state: str = "pending", hostname: str = "", name: str = "", options: list | None = None
    ) -> dict:
        """A device joined and the household decided (state) and named it, by ws.v1 as the owner."""
        self.join(mac, hostname, options)
        if state != "pending":
            self.call(DECIDED[state], mac)
        if state == "permitted":
            self.renew(mac)
        if name:
            self.call("name", mac, name)
        return self.status(mac)

    def renew(self, mac: str) -> dict:
        """The device renews its lease (as a permitted one does at once: its address's lease is longer)."""
        ip = self.status(mac)["ip"]
        self._dhcp(mac, "request", ciaddr=ip, src_ip=ip, options=self.clients.get(mac, DHCP_OPTIONS))
        return self.status(mac)

    def release(self, mac: str) -> dict:
        """The device leaves: its DHCPRELEASE (it is away; a newcomer like it may be it)."""
        device = self.status(mac)
        self._dhcp(
            mac,
            "release",
            ciaddr=device["ip"],
            src_ip=device["ip"],
            dst_ip=device["gateway"],
            options=[("server_id", device["gateway"])],
        )
        return self.status(mac)

    def copied(self, mac: str, hostname: str) -> dict:
        """Another device uses this one's MAC: its DHCP client (another host name) asks for an address."""
        self._dhcp(mac, "discover", options=[("hostname", hostname.encode()), *DHCP_OPTIONS])
        return self.status(mac)

    def moved(self, mac: str, nbytes: int) -> dict:
        """The device sent nbytes more: the switch's counter of its own rule grows, and the stats poll reads it."""
        self.counted_bytes[mac] = counted = self.counted_bytes.get(mac, 0) + nbytes
        own_rule = {"eth_type": flows.ETH_IPV4, "ipv4_src": self.status(mac)["ip"]}
        polled = [(flows.AccountingPriority.DEVICE_SOURCE, own_rule, counted // 100 + 1, counted)]
        with self.lock:
            self._apply(self.router.on_flow_stats(polled))
        return self.status(mac)

    def online_for(self, mac: str, minutes: int) -> dict:
        """The device is busy online (a video's worth of data a minute) for so many minutes of the clock."""
        for _ in range(minutes):
            self.advance(60)
            self.moved(mac, 200_000)
        return self.status(mac)

    def station_joined(self, mac: str, keyid: str = "") -> None:
        """hostapd says a station joined, with the device passphrase named keyid ("": the shared one)."""
        with self.lock:
            self._apply(self.router.joining.station_joined(mac, keyid))

    def back_under(self, mac: str, new_mac: str) -> dict:
        """The device, given a passphrase of its own, comes back under a new private MAC: it joins the radio
        with that passphrase, then asks DHCP for an address (the router knows it by its key)."""
        keyid = self.call("wifi-key", mac)["keyid"]
        self.station_joined(new_mac, keyid)
        return self.join(new_mac, self.status(new_mac)["hostname"])

    def advance(self, seconds: float) -> None:
        """Time passes: the clock moves on and the router's tick runs, as the controller's does."""
        with self.lock:
            self.clock.now += seconds
            self._apply(self.router.tick())

    def status(self, mac: str) -> dict:
        return self.call("status", mac)

    def radio_named(self, ssid: str) -> None:
        """hostapd's network name as the controller reads it at each attach ("": no Wi-Fi network)."""
        with self.lock:
            self.router.passphrases.network_named(ssid)

    # ---- over HTTP: ws.v1, and the hooks under /home/

    def app(self, environ, start_response):
        if not environ["PATH_INFO"].startswith("/home/"):
            return self.ws_v1(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        try:
            status, body = 200, self.hook(environ["PATH_INFO"], json.loads(environ["wsgi.input"].read(length) or b"{}"))
        except ApiError as exc:  # the router refused what the test asked (a name too long...): said as ws.v1 says it
            status, body = exc.status, {"error": str(exc), **exc.details}
        except (KeyError, ValueError) as exc:
            status, body = 400, {"error": repr(exc)}
        data = json.dumps(body).encode()
        start_response(f"{status} X", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def hook(self, path: str, body: dict) -> object:
        """What a browser test does to the home, or asks of it."""
        mac = body.get("mac", "")
        if path == "/home/join":
            options = [(option, value.encode()) for option, value in body.get("options", {}).items()]
            return self.joined(
                mac, body.get("state", "pending"), body.get("hostname", ""), body.get("name", ""), options
            )
        if path == "/home/release":
            return self.release(mac)
        if path == "/home/copied":
            return self.copied(mac, body["hostname"])
        if path == "/home/moved":
            return self.moved(mac, int(body["bytes"]))
        if path == "/home/online":
            return self.online_for(mac, int(body["minutes"]))
        if path == "/home/calls":
            return self.calls
        if path == "/home/qos":
            self.qos = body or None
            return {"qos": self.qos}
        raise KeyError(path)


def main():
    p = argparse.ArgumentParser(description="hwdb + the controller core + webui, for browser tests and bench")
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
    ctl = HomeOnFakeSwitch(os.path.join(tmp, "controller"), hwdb.port, radio_settings=wifi_conf).start()
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
