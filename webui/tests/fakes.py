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
    def __init__(self, hwdb_port: int | None = None):
        self.devices: dict[str, dict] = {}
        self.qos: dict | None = None  # what the QoS work reports in health, once it does
        self.apps: list[dict] = []  # the router's app table: [{app, priority, set_by}]
        self.wifi_ssid = "Home Wi-Fi"  # "" as without --wifi-ssid: own passphrases answer 501
        self.wifi_keys: dict[str, dict] = {}  # mac -> {keyid, passphrase, created}
        self.clone_suspected: dict[str, dict] = {}  # mac -> {at, differs}
        self.calls: list[tuple[str, str]] = []
        self.hwdb_port = hwdb_port
        self.next_subnet = 1
        self.lock = threading.Lock()
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
                c.query(f"insert into Events values ('new-device', '{mac}', 'DHCPDISCOVER from {hostname}')")
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

    def status_of(self, mac: str) -> dict:
        key = self.wifi_keys.get(mac)
        return {
            **self.devices[mac],
            "clone_suspected": self.clone_suspected.get(mac),
            "wifi_key": {"keyid": key["keyid"], "created": key["created"]} if key else None,
        }

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

    def wifi_key(self, method: str, mac: str):
        """The three passphrase calls, with the real controller's errors in its order."""
        if method == "wifi-key":
            if mac not in self.devices:
                return 404, {"error": f"unknown device {mac}"}
            if not self.wifi_ssid:
                return 501, {"error": "this router has no Wi-Fi network configured (--wifi-ssid)"}
            if self.devices[mac]["state"] != "permitted":
                return 400, {
                    "error": f"{mac} is {self.devices[mac]['state']}: only a permitted device gets "
                    f"its own passphrase"
                }
            passphrase = "-".join("".join(secrets.choice(PASSPHRASE_ALPHABET) for _ in range(4)) for _ in range(5))
            self.wifi_keys[mac] = {
                "keyid": "dev-" + mac.replace(":", ""),
                "passphrase": passphrase,
                "created": time.time(),
            }
            return 200, {**self.wifi_key_answer(mac), "applied": True, "note": ""}
        if mac not in self.wifi_keys:
            return 404, {"error": f"{mac} has no passphrase of its own"}
        if method == "show-wifi-key":
            return 200, self.wifi_key_answer(mac)
        del self.wifi_keys[mac]
        return 200, {"mac": mac, "revoked": True, "applied": True, "note": ""}

    def app(self, environ, start_response):
        verb, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        status, body = self.dispatch(verb, path, parse_qs(environ.get("QUERY_STRING", "")), environ)
        data = json.dumps(body).encode()
        start_response(f"{status} X", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def dispatch(self, verb, path, query, environ):
        if path.startswith("/fake/"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = json.loads(environ["wsgi.input"].read(length) or b"{}")
            if path == "/fake/join":
                return 200, self.add(
                    body["mac"], body.get("state", "pending"), body.get("hostname", ""), event=body.get("event", True)
                )
            if path == "/fake/calls":
                return 200, self.calls
            if path == "/fake/clone":
                self.suspect_clone(body["mac"], body.get("differs", "host name 'phone' -> 'intruder'"))
                return 200, self.status_of(body["mac"])
            if path == "/fake/qos":
                self.qos = body or None
                return 200, {"qos": self.qos}
            return 404, {"error": "no such fake"}
        parts = [p for p in path[len("/ws.v1/") :].split("/") if p]
        method, args = parts[0], parts[1:]
        self.calls.append((method, "/".join(args)))
        if method == "status":
            if not args:
                return 200, [self.status_of(mac) for mac in list(self.devices)]
            return (200, self.status_of(args[0])) if args[0] in self.devices else (404, {"error": "unknown device"})
        if method in ("permit", "deny", "whitelist", "blacklist"):
            if args[0] not in self.devices:
                return 404, {"error": "unknown device"}
            if method in ("permit", "deny") and self.devices[args[0]]["state"] == "blacklisted":
                # The controller's own rule: only lifting the blacklist (whitelist) undoes it.
                return 409, {"error": f"{args[0]} is blacklisted: its blacklist must be lifted first"}
            state = {"permit": "permitted", "deny": "denied", "whitelist": "permitted", "blacklist": "blacklisted"}[
                method
            ]
            self.devices[args[0]]["state"] = state
            self.clone_suspected.pop(args[0], None)  # any decision is the household's "I have seen it"
            return 200, self.status_of(args[0])
        if method == "name":
            self.devices[args[0]]["name"] = query.get("name", [""])[0]
            return 200, self.status_of(args[0])
        if method in ("wifi-key", "show-wifi-key", "revoke-wifi-key"):
            return self.wifi_key(method, args[0])
        if method in ("deny-dns", "permit-dns", "dns-rules"):
            return 501, {"error": f"{method} is not implemented yet"}
        if method == "counters":
            return 200, {"packet_in": 0}
        if method == "apps":
            return 200, self.apps
        if method == "health":
            return 200, {"switch_ready": True, "devices": len(self.devices), **({"qos": self.qos} if self.qos else {})}
        return 404, {"error": "unknown method"}


def main():
    p = argparse.ArgumentParser(description="hwdb + fake controller + webui, for browser tests and bench")
    p.add_argument("--webui-port", type=int, default=8090)
    p.add_argument("--ready-file", help="write the stack's addresses here as JSON once it serves")
    p.add_argument("--latency-seconds", type=float, default=2.0, help="the latency check's load phase")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="webui-stack-")
    hwdb = HwdbServer(os.path.join(tmp, "hwdb.sqlite")).start()
    ctl = FakeController(hwdb.port).start()
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
