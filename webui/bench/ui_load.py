"""make -C webui bench-load: bench/ui_load.py OUT.json

The web UI under abuse, two loads in turn: (1) 100 live-update streams open (several household
members, each with a few pages) while a guest floods sign-in with wrong passwords for "owner";
(2) one device holding half-sent requests, 200 at a time, each kept going by a byte now and then
and opened again when the server closes it. How long do the owner's sign-in at the wall panel
and GET /api/devices (the board's figures) take under each, against the same measured quiet in
the same run (quiet before and after the loads, pooled)? Goal: p99 under 2x quiet.

Runs the real web UI (python -m homework_webui, default settings) against the controller's core on
its fake switch and a real hwdb (tests/stack.py). Clients are told apart by address, as the UI tells a
guest's phone from the wall panel on the LAN: the wall panel is 127.0.0.1, the guest 127.0.0.2, the
trickling device 127.0.0.3, and each member's page its own 127.0.1.N.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

WEBUI = Path(__file__).resolve().parents[1]
OWNER = ("owner", "bench owner password")
MEMBER_PASSWORD = "bench member password"
STREAMS = 100
STREAMS_PER_SESSION = 4  # the UI's per-session limit
SESSIONS_PER_MEMBER = 4  # 16 streams per account, the UI's per-account limit
FLOOD_THREADS = 4
DEVICES = 20
TRICKLER = "127.0.0.3"
TRICKLES = 200
TRICKLE_EVERY_S = 0.5


def summary(samples_s: list[float]) -> dict:
    ms = sorted(s * 1000 for s in samples_s)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(ms[-1], 2),
    }


class Browser:
    """One browser: its own connection, cookie and CSRF token, from a given client address."""

    def __init__(self, port: int, source: str = "127.0.0.1"):
        self.port, self.source = port, source
        self.cookie, self.csrf = "", ""
        self.conn = self._connect()
        self.call("GET", "/api/session")

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30, source_address=(self.source, 0))

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict, float]:
        headers = {"Content-Type": "application/json", "X-CSRF-Token": self.csrf}
        if self.cookie:
            headers["Cookie"] = self.cookie
        t0 = time.monotonic()
        try:
            self.conn.request(method, path, json.dumps(body) if body is not None else None, headers)
            resp = self.conn.getresponse()
            data = resp.read()
        except (http.client.HTTPException, OSError):
            self.conn.close()
            self.conn = self._connect()
            raise
        took = time.monotonic() - t0
        if resp.getheader("Set-Cookie"):
            self.cookie = resp.getheader("Set-Cookie").split(";")[0]
        reply = json.loads(data) if resp.getheader("Content-Type", "").startswith("application/json") else {}
        self.csrf = reply.get("csrf_token", self.csrf) if isinstance(reply, dict) else self.csrf
        return resp.status, reply, took

    def sign_in(self, username: str, password: str) -> tuple[int, float]:
        status, _, took = self.call("POST", "/api/login", {"username": username, "password": password})
        return status, took


class Streams:
    """Open EventSource connections, drained by one thread (as browsers would read them)."""

    def __init__(self, port: int):
        self.port = port
        self.selector = selectors.DefaultSelector()
        self.statuses: list[int] = []
        self.bytes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drain, daemon=True)

    def open(self, cookie: str, source: str) -> None:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10, source_address=(source, 0))
        s.sendall(f"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nCookie: {cookie}\r\n\r\n".encode())
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        status = int(head.split(b" ", 2)[1])
        self.statuses.append(status)
        if status == 200:
            s.setblocking(False)
            self.selector.register(s, selectors.EVENT_READ)
        else:
            s.close()

    def _drain(self) -> None:
        while not self.stop.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                try:
                    data = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                self.bytes += len(data)
                if not data:
                    self.selector.unregister(key.fileobj)
                    key.fileobj.close()

    def open_count(self) -> int:
        return len(self.selector.get_map())

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()


def start_stack(port: int, tmp: str) -> tuple[subprocess.Popen, dict]:
    ready = os.path.join(tmp, "ready.json")
    # The controller's core and its tests' fake switch come from this checkout (as webui/pytest.ini gives pytest).
    controller = WEBUI.parent / "controller"
    path = os.pathsep.join(filter(None, [str(controller), str(controller / "tests"), os.environ.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, str(WEBUI / "tests" / "stack.py"), "--webui-port", str(port), "--ready-file", ready],
        cwd=WEBUI,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": path},
    )
    deadline = time.monotonic() + 30
    while not os.path.exists(ready):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.terminate()
            raise RuntimeError("the test stack did not start")
        time.sleep(0.05)
    with open(ready) as f:
        return proc, json.load(f)


def post_json(url: str, body: dict) -> dict:
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", "/home/join", json.dumps(body))
    reply = json.loads(conn.getresponse().read())
    conn.close()
    return reply


def measure(port: int, rounds: int) -> dict:
    """Seconds taken by the owner signing in at the wall panel (a fresh browser each time),
    and by the owner's GET /api/devices, interleaved; and the statuses they got."""
    samples: dict = {"owner_sign_in": [], "devices": [], "statuses": {}}
    owner = Browser(port)
    assert owner.sign_in(*OWNER)[0] == 200
    for i in range(rounds):
        if i % 2 == 0:
            status, took = Browser(port).sign_in(*OWNER)
            samples["statuses"][status] = samples["statuses"].get(status, 0) + 1
            samples["owner_sign_in"].append(took)
        status, _, took = owner.call("GET", "/api/devices")
        samples["statuses"][status] = samples["statuses"].get(status, 0) + 1
        samples["devices"].append(took)
    return samples


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default=str(WEBUI.parent / "bench" / "results" / "ui_load.json"))
    p.add_argument("--rounds", type=int, default=200, help="GET /api/devices per phase (a sign-in every 2)")
    args = p.parse_args()
    port = 18000 + os.getpid() % 2000
    with tempfile.TemporaryDirectory(prefix="webui-load-") as tmp:
        proc, info = start_stack(port, tmp)
        try:
            result = run(port, info, args.rounds)
        finally:
            proc.terminate()
            proc.wait(10)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def generate_load(port: int, info: dict, members: list[str], sessions: int, ready, stop, report) -> None:
    """Members' pages holding 100 streams (and some more, which must be refused), link
    figures changing so that every stream is fed, and a guest flooding sign-in. `ready` is
    set once all of it runs and the flood is past the guest's own limit (answered 429)."""
    streams = Streams(port)
    for i in range(sessions):
        source = f"127.0.1.{i + 1}"  # each page its own device
        page = Browser(port, source=source)
        assert page.sign_in(members[i // SESSIONS_PER_MEMBER], MEMBER_PASSWORD)[0] == 200
        for _ in range(STREAMS_PER_SESSION + 1):  # one more than a session may have
            streams.open(page.cookie, source)
    streams.thread.start()
    flood: dict[int, int] = {}

    def guest_flood():
        guest = Browser(port, source="127.0.0.2")
        while not stop.is_set():
            try:
                status, _ = guest.sign_in(OWNER[0], "a guess")
            except (http.client.HTTPException, OSError):
                status = 0
            flood[status] = flood.get(status, 0) + 1

    def link_figures():
        n = 0
        while not stop.wait(0.25):
            n += 1
            subprocess.run(
                [
                    info["hwdb_bin"],
                    "query",
                    "--server",
                    f"127.0.0.1:{info['hwdb_port']}",
                    f"insert into Links values ('02:be:00:00:00:{n % DEVICES:02x}', {-40 - n % 40}, 1, 100)",
                ],
                stdout=subprocess.DEVNULL,
                check=False,
            )

    workers = [threading.Thread(target=guest_flood, daemon=True) for _ in range(FLOOD_THREADS)]
    workers.append(threading.Thread(target=link_figures, daemon=True))
    for w in workers:
        w.start()
    deadline = time.monotonic() + 60
    while not flood.get(429) and time.monotonic() < deadline:
        stop.wait(0.05)
    ready.set()
    stop.wait()
    open_streams = streams.open_count()
    for w in workers:
        w.join(30)
    streams.close()
    report.put(
        {
            "streams_accepted": streams.statuses.count(200),
            "streams_refused": streams.statuses.count(429),
            "streams_still_open_at_end": open_streams,
            "stream_bytes_received": streams.bytes,
            "guest_sign_in_attempts": flood,
        }
    )


def generate_trickle(port: int, ready, stop, report) -> None:
    """One device keeping TRICKLES half-sent requests going, a byte every TRICKLE_EVERY_S, and
    opening another whenever the server refuses or closes one. `ready` is set once it has tried
    them all."""
    # refused_at_once: the connect or the first bytes failed; closed_by_server: found reset or
    # closed later (most of them reset at accept, the rest at the deadline).
    counts = {"attempts": 0, "refused_at_once": 0, "closed_by_server": 0, "bytes_trickled": 0}
    held_max = 0

    def connect() -> socket.socket | None:
        counts["attempts"] += 1
        s = socket.socket()
        try:
            s.bind((TRICKLER, 0))
            s.settimeout(2)
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ")
            s.setblocking(False)
            return s
        except OSError:
            counts["refused_at_once"] += 1
            s.close()
            return None

    socks = [connect() for _ in range(TRICKLES)]
    ready.set()
    while not stop.wait(TRICKLE_EVERY_S):
        held = 0  # connections the server still had open this round
        for i, s in enumerate(socks):
            if s is not None:
                try:
                    if s.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    try:
                        s.send(b"a")
                        counts["bytes_trickled"] += 1
                        held += 1
                        continue
                    except OSError:
                        pass
                except OSError:
                    pass
                counts["closed_by_server"] += 1
                s.close()
            socks[i] = connect()
        held_max = max(held_max, held)
    for s in socks:
        if s is not None:
            s.close()
    report.put({**counts, "connections": TRICKLES, "most_held_open_by_the_server": held_max})


def under(load, args: tuple, port: int, rounds: int) -> tuple[dict, dict]:
    """measure() while `load` runs in its own process (so that its threads do not slow the
    measuring one); its report beside."""
    ctx = multiprocessing.get_context("fork")
    ready, stop, report = ctx.Event(), ctx.Event(), ctx.Queue()
    loader = ctx.Process(target=load, args=(port, *args, ready, stop, report))
    loader.start()
    if not ready.wait(120):
        loader.terminate()
        raise RuntimeError("the load did not start")
    samples = measure(port, rounds)
    stop.set()
    load_report = report.get(timeout=60)
    loader.join(30)
    return samples, load_report


def run(port: int, info: dict, rounds: int) -> dict:
    with open(info["setup_code_file"]) as f:
        code = f.read().strip()
    owner = Browser(port)
    status, _, _ = owner.call("POST", "/api/setup", {"username": OWNER[0], "password": OWNER[1], "setup_code": code})
    assert status == 201, status
    for i in range(DEVICES):
        post_json(info["controller"], {"mac": f"02:be:00:00:00:{i:02x}", "state": "permitted"})

    quiet_before = measure(port, rounds)

    sessions = -(-STREAMS // STREAMS_PER_SESSION)
    members = [f"member{m}" for m in range(-(-sessions // SESSIONS_PER_MEMBER))]
    for name in members:
        assert owner.call("POST", "/api/accounts", {"username": name, "password": MEMBER_PASSWORD})[0] == 201
    loaded, load_report = under(generate_load, (info, members, sessions), port, rounds)
    trickled, trickle_report = under(generate_trickle, (), port, rounds)

    quiet_after = measure(port, rounds)
    kinds = ("owner_sign_in", "devices")
    # Quiet before and after the load, pooled: drift on a shared machine counts for both.
    quiet = {
        k: {
            **summary(quiet_before[k] + quiet_after[k]),
            "before": summary(quiet_before[k]),
            "after": summary(quiet_after[k]),
        }
        for k in kinds
    }
    load = {k: summary(loaded[k]) for k in kinds}
    trickle = {k: summary(trickled[k]) for k in kinds}
    return {
        "setup": "real web UI (python -m homework_webui, default limits) + the controller's core on its fake switch "
        "(tests/stack.py) + real "
        f"hwdb on loopback; the wall panel is client address 127.0.0.1, the guest 127.0.0.2, the trickling "
        f"device {TRICKLER}, each member's page its own 127.0.1.N",
        "load": {**load_report, "flood_threads": FLOOD_THREADS, "devices": DEVICES},
        "quiet": {**quiet, "statuses": merge(quiet_before["statuses"], quiet_after["statuses"])},
        "loaded": {**load, "statuses": loaded["statuses"]},
        "ratio_p99_loaded_to_quiet": {k: round(load[k]["p99_ms"] / quiet[k]["p99_ms"], 2) for k in kinds},
        "ratio_median_loaded_to_quiet": {k: round(load[k]["median_ms"] / quiet[k]["median_ms"], 2) for k in kinds},
        "trickle": {**trickle_report, "trickle_every_s": TRICKLE_EVERY_S},
        "trickled": {**trickle, "statuses": trickled["statuses"]},
        "ratio_p99_trickled_to_quiet": {k: round(trickle[k]["p99_ms"] / quiet[k]["p99_ms"], 2) for k in kinds},
        "ratio_median_trickled_to_quiet": {k: round(trickle[k]["median_ms"] / quiet[k]["median_ms"], 2) for k in kinds},
        "goal": "p99 under 2x quiet under each load; the owner's sign-ins all 200",
    }


def merge(a: dict, b: dict) -> dict:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


if __name__ == "__main__":
    main()
