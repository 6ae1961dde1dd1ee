"""A call under load: one device's two-way call while another device's bulk transfers saturate
the line, as the household lives it (a video call during a game download). Used by the priority
tests and `make bench`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .call import PORT as CALL_PORT
from .topology import INTERNET_IP, IPERF6_PORT, IPERF_PORT, NEIGHBOUR_IPERF_PORT, WAN_INET_IP
from .wait import wait_until

UP, DOWN = "up", "down"
BULK_STREAMS = 4
# Socket buffers as a backup or download client sets them: without, Linux sizes the receive window to
# what the reader took last round trip, which keeps the queue short; with them, TCP fills whatever
# queue the line has, as bulk transfers at home do (the original router saw 200-500 ms).
BULK_WINDOW = "2M"
# CUBIC, the TCP that Linux, Windows and macOS use by default (iperf3 asks its server for it too).
# These machines default to BBR, which paces to keep queues short: it would hide what a household's
# bulk transfers do to its queue.
BULK_CONGESTION = "cubic"
QUEUE_FILL_S = 3.0  # bulk transfers run this long before the call starts, so the queue is full
CALL_APP = "video-call"  # what the router's port table calls UDP 3478 (STUN/TURN), the call's port


def set_priority(home, app: str, priority: str) -> None:
    """As the phone page does: a row in hwdb's AppPriority (the web UI's own tests cover the page);
    the router has it within a second or two, even just after hwdb restarted."""
    home.hwdb(f"insert into AppPriority values ('{app}', '{priority}')")
    wait_until(
        f"the router to put {app} at {priority}",
        lambda: home.api("GET", "health")[1]["qos"]["app_priorities"].get(app) == priority,
        5,
        0.1,
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


@dataclass
class CallUnderLoad:
    direction: str
    delays_ms: list[float]  # the call's one-way delay per packet received, in sending order
    sent_at_s: list[float]  # when each of those packets left, seconds from the call's start
    loss_pct: float
    bulk_mbit: float  # what the bulk transfers got, together
    changes: list[float] = field(default_factory=list)  # when `during` ran, seconds from the call's start

    def p(self, q: float, after_s: float = 0.0, before_s: float = float("inf")) -> float:
        """The q-th percentile delay of the packets sent between after_s and before_s."""
        pairs = zip(self.delays_ms, self.sent_at_s, strict=True)
        return percentile([d for d, t in pairs if after_s <= t < before_s], q)

    def summary(self) -> dict:
        slowest = sorted(zip(self.delays_ms, self.sent_at_s, strict=True), reverse=True)[:5]
        return {
            "direction": self.direction,
            "packets": len(self.delays_ms),
            "loss_pct": self.loss_pct,
            "p50_ms": round(self.p(50), 3),
            "p99_ms": round(self.p(99), 3),
            "bulk_mbit": round(self.bulk_mbit, 2),
            "slowest_ms_at_s": [(round(d, 1), round(t, 2)) for d, t in slowest],
        }


def bulk_transfer(
    home,
    device: str,
    seconds: float,
    direction: str = UP,
    streams: int = BULK_STREAMS,
    window: str = BULK_WINDOW,
    to: str = WAN_INET_IP,
) -> subprocess.Popen:
    """iperf3 from `device` to the internet's server (at `to`: its IPv4 or its IPv6 address, each with a
    server of its own), saturating the line for `seconds`; its JSON report on stdout."""
    return _iperf3(
        lambda *cmd, **popen_args: home.spawn(device, *cmd, **popen_args),
        IPERF6_PORT if ":" in to else IPERF_PORT,
        seconds,
        direction,
        streams,
        window,
        to,
    )


def neighbour_download(home, seconds: float) -> subprocess.Popen:
    """Household B's router downloads from the internet's second iperf3 server as fast as the ISP lets it."""
    return _iperf3(home.isp.b_spawn, NEIGHBOUR_IPERF_PORT, seconds, DOWN, BULK_STREAMS, BULK_WINDOW, WAN_INET_IP)


def _iperf3(
    spawn, port: int, seconds: float, direction: str, streams: int, window: str, server: str
) -> subprocess.Popen:
    """The server runs one test at a time and refuses a client while it is still finishing the last
    one ("busy"): that start is tried again, not taken for a transfer."""
    deadline = time.monotonic() + 15
    while True:
        transfer = spawn(
            "iperf3",
            "--client",
            server,
            "--port",
            port,
            "--time",
            str(int(seconds)),
            "--parallel",
            str(streams),
            "--window",
            window,
            "--congestion",
            BULK_CONGESTION,
            "--json",
            *(["--reverse"] if direction == DOWN else []),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = transfer.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            return transfer  # running
        if "busy" not in out + err or time.monotonic() > deadline:
            raise RuntimeError(f"iperf3 did not start: {out[-500:]} {err[-500:]}")
        time.sleep(0.3)


def call_under_load(
    home,
    caller: str,
    bulk: str,
    direction: str,
    seconds: float,
    during: tuple[float, Callable[[], object]] | None = None,
    to: str = WAN_INET_IP,
    bulk_to: str = WAN_INET_IP,
) -> CallUnderLoad:
    """`caller` makes a call for `seconds` while `bulk` uploads (direction UP) or downloads (DOWN)
    as fast as the line allows; `during=(t, fn)` calls fn() t seconds into the call; `to`: the
    internet's address the call goes to (its IPv6 one for a call over IPv6); `bulk_to`: the one the
    bulk transfers go to."""
    reflector = home.internet_spawn(
        sys.executable,
        "-m",
        "homenet.call",
        "reflect",
        "--port",
        CALL_PORT,
        "--address",
        to,
        "--duration",
        seconds + QUEUE_FILL_S + 30,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reflector.stderr is not None
    ready = reflector.stderr.readline()
    if ready.strip() != "ready":  # it could not bind (say, an earlier call's reflector still holds the port)
        _, err = reflector.communicate(timeout=10)
        raise RuntimeError(f"the call's reflector did not start: {ready}{err[-1000:]}")
    transfer = bulk_transfer(home, bulk, seconds + QUEUE_FILL_S + 2, direction, to=bulk_to)
    changes = []
    try:
        time.sleep(QUEUE_FILL_S)
        phone = home.spawn(
            caller,
            sys.executable,
            "-m",
            "homenet.call",
            "call",
            "--to",
            to,
            "--duration",
            seconds,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started = time.time()
        if during:
            at, fn = during
            time.sleep(max(0.0, started + at - time.time()))
            changes.append(time.time() - started)
            fn()
        down_out, down_err = phone.communicate(timeout=seconds + 30)
        if phone.returncode:
            raise RuntimeError(f"the call failed: {down_err}")
        bulk_out, bulk_err = transfer.communicate(timeout=seconds + 60)
    finally:
        for proc in (transfer, reflector):
            if proc.poll() is None:
                proc.terminate()
    up_out, _ = reflector.communicate(timeout=10)
    report = json.loads(up_out if direction == UP else down_out)
    if not report["packets"]:  # say which way the call was lost, not only that its delays are missing
        up, down = json.loads(up_out), json.loads(down_out)
        raise RuntimeError(
            f"nothing of the call came back: the internet got {up['received']} of the {down['sent']} packets "
            f"the device sent, the device got {down['received']} reflections"
        )
    try:
        end = json.loads(bulk_out)["end"]
        bulk_mbit = end["sum_received"]["bits_per_second"] / 1e6
    except (ValueError, KeyError) as exc:
        raise RuntimeError(f"iperf3 failed: {bulk_out[-500:]} {bulk_err[-500:]}") from exc
    return CallUnderLoad(
        direction,
        [p[2] for p in report["packets"]],
        [p[1] / 1e9 - started for p in report["packets"]],
        report["loss_pct"],
        bulk_mbit,
        changes,
    )


def busy_page(connections: int, part_bytes: int) -> str:
    """A script to run inside a device (`python -c`): `connections` fetches of a `part_bytes` part of a
    page from the emulated internet, all opened at once (what a browser does on a busy page); it prints
    [local port, ok] for each."""
    return f"""
import json, socket, threading
results, ready = [], threading.Barrier({connections})
def one():
    ready.wait()
    with socket.create_connection(("{INTERNET_IP}", 80), timeout=30) as s:
        port = s.getsockname()[1]
        s.sendall(b"GET /bulk?bytes={part_bytes} HTTP/1.0\\r\\nHost: www.example.test\\r\\n\\r\\n")
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    results.append([port, got.startswith(b"HTTP/1.0 200") and got.endswith(bytes(100))])
threads = [threading.Thread(target=one) for _ in range({connections})]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(results))
"""
