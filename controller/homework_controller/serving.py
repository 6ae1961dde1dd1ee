"""What the I/O edge serves with: ws.v1's threaded WSGI server on loopback, and the controller's lock,
which remembers its longest hold and when each long one was (ws.v1 `counters`)."""

from __future__ import annotations

import logging
import socketserver
import sys
import threading
import time
from collections import deque
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


class TimedLock:
    """The controller's lock, remembering its longest hold and who held it (ws.v1 `counters`).

    Everything under it delays every device's DHCP, ARP and DNS, so its longest hold is the
    number that says whether one device can stall the others.
    """

    # A hold this long is remembered with when it ended (the last LONG_HOLDS of them), so a measurement
    # reads the longest hold of its own phase rather than the longest since the controller started.
    LONG_HOLD_S = 0.001
    LONG_HOLDS = 512

    def __init__(self):
        self._lock = threading.Lock()
        self._since = 0.0
        self.max_hold_s, self.max_hold_by = 0.0, ""
        # (ended, monotonic; held, s; the function whose `with` block it was)
        self.long_holds: deque[tuple[float, float, str]] = deque(maxlen=self.LONG_HOLDS)

    def __enter__(self):
        self._lock.acquire()
        self._since = time.monotonic()
        return self

    def __exit__(self, *exc):
        ended = time.monotonic()
        held = ended - self._since
        if held >= self.LONG_HOLD_S or held > self.max_hold_s:
            # Which handler held it: the function whose `with` block this is (looked up only for a long hold).
            where = sys._getframe(1).f_code.co_name
            if held >= self.LONG_HOLD_S:
                self.long_holds.append((ended, held, where))
            if held > self.max_hold_s:
                self.max_hold_s, self.max_hold_by = held, f"{threading.current_thread().name} in {where}"
        self._lock.release()
