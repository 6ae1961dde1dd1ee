"""What the I/O edge serves with: ws.v1's threaded WSGI server on loopback, and the controller's lock,
which remembers its longest hold since start and in the current phase (ws.v1 `counters`)."""

from __future__ import annotations

import logging
import socketserver
import sys
import threading
import time
from wsgiref import simple_server

LOG = logging.getLogger("homework.controller")


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, fmt, *args):
        LOG.debug("ws.v1 %s " + fmt, self.client_address[0], *args)


def api_server(host: str, port: int, app) -> simple_server.WSGIServer:
    """ws.v1's server, a thread per request (its `serve_forever` is the caller's to run); requests
    are logged at debug level only."""
    return simple_server.make_server(host, port, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)


# How long a thread releasing the controller's lock steps aside when another waits for it: long enough for the
# waiter, woken by the release, to take it (a few scheduler wake-ups), short beside any hold.
GIVE_WAY_S = 0.0001


class TimedLock:
    """The controller's lock, remembering its longest hold and who held it (ws.v1 `counters`): since the
    controller started, and since the current phase started (ws.v1 `counters-phase`), so a measurement reads
    the longest hold of its own phase, every hold counted, however many there were.

    Everything under it delays every device's DHCP, ARP and DNS, so its longest hold is the
    number that says whether one device can stall the others. The holder's own CPU time during that
    hold is named beside it: a hold much longer than its CPU time was the holder waiting for a core or
    the GIL (too many runnable threads), not work to move off the lock.

    It is handed over in turn: a thread that releases it while another waits steps aside for a moment
    (`GIVE_WAY_S`), so the waiter gets it. A plain lock is not fair: released and taken again at once by
    a thread that keeps the GIL (the worker serving a storm's frames turn after turn, a poll in parts),
    it went to that thread again and again, and another device's DNS lookup, which asks for it twice,
    waited up to a second (`test_api.py`).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.waiting = 0  # threads blocked on it now (counted under `_counting`, read without)
        self._counting = threading.Lock()
        self._since = self._since_cpu = 0.0
        self.max_hold_s, self.max_hold_by = 0.0, ""
        self.phase_started = time.monotonic()
        self.phase_max_hold_s, self.phase_max_hold_by = 0.0, ""

    def __enter__(self):
        if not self._lock.acquire(blocking=False):
            with self._counting:
                self.waiting += 1
            self._lock.acquire()
            with self._counting:
                self.waiting -= 1
        self._since, self._since_cpu = time.monotonic(), time.thread_time()
        return self

    def __exit__(self, *exc):
        held = time.monotonic() - self._since
        if held > self.phase_max_hold_s:  # never above the longest since start
            # Which handler held it: the function whose `with` block this is (looked up only for a new longest).
            on_cpu_ms = (time.thread_time() - self._since_cpu) * 1e3
            by = f"{threading.current_thread().name} in {sys._getframe(1).f_code.co_name}, {on_cpu_ms:.1f} ms on a CPU"
            self.phase_max_hold_s, self.phase_max_hold_by = held, by
            if held > self.max_hold_s:
                self.max_hold_s, self.max_hold_by = held, by
        self._lock.release()
        if self.waiting:
            time.sleep(GIVE_WAY_S)  # the waiter, woken by the release, takes it meanwhile

    def start_phase(self) -> float:
        """From now on the phase's longest hold counts afresh (called while holding the lock, as ws.v1's
        operations are: the hold that calls it is the phase's first). Returns when the phase started."""
        self.phase_started = time.monotonic()
        self.phase_max_hold_s, self.phase_max_hold_by = 0.0, ""
        return self.phase_started
