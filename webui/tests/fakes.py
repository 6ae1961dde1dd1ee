"""Test doubles and a stand-alone stack: a fake controller speaking ws.v1, a real hwdb.

The fake controller plays the real one's part towards hwdb too: when told that a device
asks to join (POST /fake/join) it records the device as pending and inserts the
`new-device` Events row, as the controller does.

    python tests/fakes.py --webui-port 8090     # hwdb + fake controller + webui, for e2e/bench
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from socketserver import ThreadingMixIn
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from hwdb_client import HwdbClient, HwdbError, default_binary

HERE = os.path.dirname(os.path.abspath(__file__))


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
        self.proc = subprocess.Popen([self.binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--db", self.db_path],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class FakeController:
    def __init__(self, hwdb_port: int | None = None):
        self.devices: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.hwdb_port = hwdb_port
        self.next_subnet = 1
        self.lock = threading.Lock()
        self.port = free_port()
        self.server = make_server("127.0.0.1", self.port, self.app, server_class=_Threading, handler_class=_Quiet)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def add(self, mac, state="pending", hostname="", name="", event=True) -> dict:
        with self.lock:
            n = self.next_subnet
            self.next_subnet += 1
            now = time.time()
            net = f"10.2.{n * 4 // 256}.{n * 4 % 256}"
            dev = {"mac": mac, "state": state, "ip": f"10.2.{n * 4 // 256}.{n * 4 % 256 + 2}",
                   "gateway": f"10.2.{n * 4 // 256}.{n * 4 % 256 + 1}", "subnet": f"{net}/30",
                   "hostname": hostname, "vendor_class": "", "name": name, "first_seen": now, "last_seen": now,
                   "lease_expires": now + 30, "lease_seconds_left": 30}
            self.devices[mac] = dev
        if event and self.hwdb_port:
            with HwdbClient("127.0.0.1", self.hwdb_port, timeout=3) as c:
                c.query(f"insert into Events values ('new-device', '{mac}', 'DHCPDISCOVER from {hostname}')")
        return dev

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
                return 200, self.add(body["mac"], body.get("state", "pending"), body.get("hostname", ""),
                                     event=body.get("event", True))
            if path == "/fake/calls":
                return 200, self.calls
            return 404, {"error": "no such fake"}
        parts = [p for p in path[len("/ws.v1/"):].split("/") if p]
        method, args = parts[0], parts[1:]
        self.calls.append((method, "/".join(args)))
        if method == "status":
            if not args:
                return 200, list(self.devices.values())
            return (200, self.devices[args[0]]) if args[0] in self.devices else (404, {"error": "unknown device"})
        if method in ("permit", "deny", "whitelist", "blacklist"):
            if args[0] not in self.devices:
                return 404, {"error": "unknown device"}
            state = {"permit": "permitted", "deny": "denied", "whitelist": "permitted",
                     "blacklist": "blacklisted"}[method]
            self.devices[args[0]]["state"] = state
            return 200, self.devices[args[0]]
        if method == "name":
            self.devices[args[0]]["name"] = query.get("name", [""])[0]
            return 200, self.devices[args[0]]
        if method in ("deny-dns", "permit-dns", "dns-rules"):
            return 501, {"error": f"{method} is not implemented yet"}
        if method == "counters":
            return 200, {"packet_in": 0}
        return 404, {"error": "unknown method"}


def main():
    p = argparse.ArgumentParser(description="hwdb + fake controller + webui, for browser tests and bench")
    p.add_argument("--webui-port", type=int, default=8090)
    p.add_argument("--ready-file", help="write the stack's addresses here as JSON once it serves")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="webui-stack-")
    hwdb = HwdbServer(os.path.join(tmp, "hwdb.sqlite")).start()
    ctl = FakeController(hwdb.port).start()
    webui = subprocess.Popen([sys.executable, "-m", "homework_webui", "--listen", f"127.0.0.1:{args.webui_port}",
                              "--controller-url", ctl.url, "--hwdb", f"127.0.0.1:{hwdb.port}",
                              "--state-dir", os.path.join(tmp, "state"), "--log-level", "WARNING"],
                             cwd=os.path.join(HERE, ".."))
    info = {"webui": f"http://127.0.0.1:{args.webui_port}", "controller": ctl.url, "hwdb_port": hwdb.port,
            "hwdb_bin": hwdb.binary, "hwdb_db": hwdb.db_path, "tmp": tmp,
            "setup_code_file": os.path.join(tmp, "state", "setup-code")}
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
        hwdb.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
