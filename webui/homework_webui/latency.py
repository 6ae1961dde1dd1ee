"""The household's "latency under load" check: how much a full connection delays everything else.

Idle round trips first, then a saturating download and upload in parallel while probing
every ~100 ms; the added latency is graded on the bufferbloat scale of the DSLReports speed
test (https://www.dslreports.com/faq/17930). Probes are TCP connect round trips to the
target's host and port (the SYN/SYN-ACK exchange is answered by the target's kernel, so it
measures the path and its queues, not the test server's load), because the web UI runs
without the privileges raw ICMP sockets need.

The target is a web server with `GET {base}/bulk?bytes=N` (a body of N bytes) and
`POST {base}/sink` (reads and discards the body). Grading and summarising are pure; the
measuring is `LatencyCheck.run`.
"""

from __future__ import annotations

import fcntl
import http.client
import socket
import statistics
import struct
import termios
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

# (grade, added latency below which it is given, in ms); 400 ms or more is an F.
GRADES = (("A+", 5.0), ("A", 30.0), ("B", 60.0), ("C", 200.0), ("D", 400.0))
FAILED_GRADE = "F"
BLOCK = 64 * 1024
# One download asks for this much; when it ends before the load phase does, another follows.
BULK_BYTES = 1 << 30
SINK_BYTES = 64 << 20


def grade(added_ms: float) -> str:
    for letter, below in GRADES:
        if added_ms < below:
            return letter
    return FAILED_GRADE


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summarise(
    idle_rtts: list[float],
    loaded_rtts: list[float],
    loaded_sent: int,
    down_bytes: int,
    up_bytes: int,
    seconds: float,
    probe_timeout_ms: float,
) -> dict:
    """The result of a check from its raw measurements (round trips in ms; None-free lists
    of the probes that were answered). Lost loaded probes count as the probe timeout, so a
    connection that drops everything under load grades F rather than looking perfect."""
    idle = statistics.median(idle_rtts)
    lost = loaded_sent - len(loaded_rtts)
    loaded_all = loaded_rtts + [probe_timeout_ms] * lost
    loaded = statistics.median(loaded_all) if loaded_all else idle
    loaded_p90 = percentile(loaded_all, 0.9) if loaded_all else idle
    added = max(0.0, loaded - idle)
    return {
        "grade": grade(added),
        "idle_ms": round(idle, 2),
        "loaded_ms": round(loaded, 2),
        "loaded_p90_ms": round(loaded_p90, 2),
        "added_ms": round(added, 2),
        "added_p90_ms": round(max(0.0, loaded_p90 - idle), 2),
        "down_kbit": round(down_bytes * 8 / 1000 / seconds) if seconds > 0 else 0,
        "up_kbit": round(up_bytes * 8 / 1000 / seconds) if seconds > 0 else 0,
        "loss_pct": round(100.0 * lost / loaded_sent, 1) if loaded_sent else 0.0,
        "probes": {"idle": len(idle_rtts), "loaded": loaded_sent},
    }


@dataclass(frozen=True)
class Target:
    """Where the check sends its load: an http:// base URL."""

    host: str
    port: int
    path: str  # the base path, without a trailing slash

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the latency target must be an http:// URL, not {url!r}")
        return cls(parts.hostname, parts.port or 80, parts.path.rstrip("/"))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class TargetError(Exception):
    """The test server does not answer, or does not serve /bulk and /sink."""


class CheckRunning(Exception):
    """A check is already running (one at a time router-wide: two would load the line twice)."""


class LatencyCheck:
    def __init__(
        self,
        target: Target,
        duration: float = 8.0,
        interval: float = 0.1,
        idle_probes: int = 5,
        probe_timeout: float = 1.0,
    ):
        self.target, self.duration, self.interval = target, duration, interval
        self.idle_probes, self.probe_timeout = idle_probes, probe_timeout
        self._running = threading.Lock()

    @property
    def running(self) -> bool:
        return self._running.locked()

    def run(self) -> dict:
        if not self._running.acquire(blocking=False):
            raise CheckRunning("a connection check is already running; try again when it has finished")
        try:
            return self._measure()
        finally:
            self._running.release()

    def probe(self, family: int, address: tuple) -> float | None:
        """One TCP connect round trip in ms, or None if it was not answered in time."""
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.probe_timeout)
            start = time.perf_counter()
            try:
                sock.connect(address)
            except OSError:
                return None
            return (time.perf_counter() - start) * 1000

    def _probe_every_interval(self, until: float, family: int, address: tuple) -> tuple[list[float], int]:
        rtts, sent = [], 0
        next_at = time.monotonic()
        while next_at < until:
            time.sleep(max(0.0, next_at - time.monotonic()))
            sent += 1
            rtt = self.probe(family, address)
            if rtt is not None:
                rtts.append(rtt)
            next_at = max(next_at + self.interval, time.monotonic())
        return rtts, sent

    def _measure(self) -> dict:
        # Resolved once, so that no probe's round trip includes a name lookup.
        try:
            family, _, _, _, address = socket.getaddrinfo(self.target.host, self.target.port, type=socket.SOCK_STREAM)[
                0
            ]
        except OSError as exc:
            raise TargetError(f"the test server's name {self.target.host} does not resolve ({exc})") from None
        idle, _ = self._probe_every_interval(time.monotonic() + self.idle_probes * self.interval, family, address)
        if not idle:
            raise TargetError(f"the test server {self.target.address} does not answer")
        stop = threading.Event()
        moved = {"down": 0, "up": 0}
        refused: dict[str, str] = {}
        workers = [
            threading.Thread(target=transfer, args=(stop, moved, refused), name=f"latency-{direction}", daemon=True)
            for direction, transfer in (("down", self._download), ("up", self._upload))
        ]
        start = time.monotonic()
        for w in workers:
            w.start()
        try:
            loaded, sent = self._probe_every_interval(start + self.duration, family, address)
        finally:
            stop.set()
        elapsed = time.monotonic() - start
        for w in workers:
            w.join(self.probe_timeout + 5)
        if refused:
            raise TargetError(
                "; ".join(f"the test server {self.target.address} answered {what}" for what in refused.values())
            )
        return summarise(idle, loaded, sent, moved["down"], moved["up"], elapsed, self.probe_timeout * 1000)

    def _connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.target.host, self.target.port, timeout=self.probe_timeout + 2)

    def _download(self, stop: threading.Event, moved: dict, refused: dict) -> None:
        while not stop.is_set():
            conn = self._connection()
            try:
                conn.request("GET", f"{self.target.path}/bulk?bytes={BULK_BYTES}")
                resp = conn.getresponse()
                if resp.status != 200:
                    refused["down"] = f"{resp.status} to GET {self.target.path}/bulk"
                    return
                while not stop.is_set():
                    block = resp.read1(BLOCK)
                    if not block:
                        break
                    moved["down"] += len(block)
            except (OSError, http.client.HTTPException):
                stop.wait(self.interval)  # a dropped transfer: start another, not in a tight loop
            finally:
                conn.close()

    def _upload(self, stop: threading.Event, moved: dict, refused: dict) -> None:
        block = bytes(BLOCK)
        while not stop.is_set():
            conn = self._connection()
            try:
                conn.putrequest("POST", f"{self.target.path}/sink")
                conn.putheader("Content-Type", "application/octet-stream")
                conn.putheader("Content-Length", str(SINK_BYTES))
                conn.endheaders()
                for _ in range(SINK_BYTES // BLOCK):
                    if stop.is_set():
                        # What is still in our send queue has not crossed the line.
                        moved["up"] -= _unacknowledged(conn.sock)
                        return
                    conn.send(block)
                    moved["up"] += BLOCK
                status = conn.getresponse().status
                if status != 200:
                    refused["up"] = f"{status} to POST {self.target.path}/sink"
                    return
            except (OSError, http.client.HTTPException):
                stop.wait(self.interval)  # a dropped transfer: start another, not in a tight loop
            finally:
                conn.close()


def _unacknowledged(sock: socket.socket | None) -> int:
    """Bytes handed to the kernel that the peer has not acknowledged yet (Linux SIOCOUTQ):
    a send buffer holds megabytes, which would otherwise count as uploaded."""
    if sock is None:
        return 0
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except OSError:
        return 0
