"""How the web UI is served: waitress, sized so that live streams cannot take the household's
threads, with each client's connections and request bodies bounded where waitress reads them,
and with clients already held back kept out of the household's way.

waitress's own limits are router-wide: `connection_limit` stops it accepting anyone once one
device holds that many connections, `channel_timeout` is reset by every byte (a byte now and
then holds a connection forever), and it reads a request's whole body (up to
`max_request_body_size`, spilling to /tmp past `inbuf_overflow`) before the application can look
at who sent it. So `HomeworkServer` decides at accept, per client address (`ConnectionBook`:
each LAN device its own allowance, all of the LAN together a share that leaves the wall panel
on loopback its own), `HomeworkChannel` closes a connection whose request is not in by its
deadline, and `BodyLimitParser` refuses with 413 a body larger than the request may have, on its
headers, before reading it: only an owner's update piece may be large (app.body_limit).

waitress parses each request on its main loop and hands the connection to a task dispatcher,
whose worker threads run the application. A guest flooding sign-in with wrong passwords is
answered 429 after its fifth failure, but each answer still took a worker thread, and a flood
over a few keep-alive connections asks again the moment it is answered: hundreds of requests
a second, all taking turns with the household's on the same pool, on the same two cores.
`HeldBackLane` sends a request from a client that is already held back (see
security.HeldBack) to a lane of its own instead: one thread, answering at most
`HELD_BACK_PER_SECOND` such requests a second. The flood waits for its 429s there, costing
the router almost nothing, and never queues in front of the household's requests.
"""

from __future__ import annotations

import copy
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import BaseWSGIServer, MultiSocketServer, TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from .security import is_loopback
from .services import services
from .updates import CHUNK_BYTES

# Answers to held-back requests, router-wide: a held-back client gets its 429 at this pace
# however many connections it uses, and the 429 it gets is all it could get anyway.
HELD_BACK_PER_SECOND = 20.0


@dataclass(frozen=True)
class ClientLimits:
    """What one client may hold of the server, decided where waitress reads its connections."""

    # Connections one address may have open: a browser uses at most 6 per site, streams included.
    per_address: int = 24
    # From a request's first byte to its last header (and a small body): a client that trickles
    # a byte now and then is closed when this is up.
    request_seconds: float = 10.0
    # A large body (an update piece) gets this much more time per byte: 8 MiB at 64 KiB/s.
    body_bytes_per_second: int = 64 << 10


# waitress's connection_limit, beside ours: the listening sockets and its wake-up pipe.
_OWN_SOCKETS = 8


def waitress_options(listen: list[str], workers: int, max_streams: int) -> dict:
    """Every live stream holds a thread for as long as the page is open, so the server gets
    one thread per allowed stream on top of `workers` for ordinary requests: however many
    streams are open, sign-in and the API still have their own threads."""
    return {
        "listen": " ".join(listen),
        "threads": workers + max_streams,
        # ConnectionBook refuses before waitress would stop accepting altogether (which is
        # everyone's loss, the wall panel's included): the LAN's share and loopback's.
        "connection_limit": 2 * _share(max_streams) + _OWN_SOCKETS,
        "ident": "homework-webui",
        "channel_timeout": 60,
        # How often waitress looks for idle connections, and HomeworkServer for late requests.
        "cleanup_interval": 1,
        # Keep reading a connection while its request runs, so a live stream learns at once
        # that its page has gone (environ["waitress.client_disconnected"]).
        "channel_request_lookahead": 5,
        # No proxy in front of us: remote_addr must be the real peer for the device-access
        # rule, so waitress trusts no forwarding headers.
        "clear_untrusted_proxy_headers": True,
        # Our requests' headers are a few hundred bytes (one small cookie); waitress's default
        # lets every connection hold 256 KiB of them.
        "max_request_header_size": 32 << 10,
        # The largest body anyone may send (an owner's update piece); each request's own limit
        # is decided on its headers (BodyLimitParser).
        "max_request_body_size": CHUNK_BYTES + 1,  # waitress refuses a body of exactly this size
    }


def _share(max_streams: int) -> int:
    """Connections the whole LAN may hold, and loopback (the wall panel on the router) apart:
    waitress's old default of 100, plus one per allowed live stream."""
    return 100 + max_streams


class ConnectionBook:
    """Open connections per client address. An address may hold `per_address`; the LAN's
    addresses together `lan_share`; loopback, where the wall panel runs, has a share of its own,
    so no number of LAN devices can take the panel's connections."""

    def __init__(self, per_address: int, lan_share: int, loopback_share: int):
        self.per_address, self.lan_share, self.loopback_share = per_address, lan_share, loopback_share
        self._open: dict[str, int] = {}
        self._lan = self._loopback = 0
        self._lock = threading.Lock()  # opened and closed on the server's loop; closed from workers too

    def has_room(self, addr: str) -> bool:
        with self._lock:
            if self._open.get(addr, 0) >= self.per_address:
                return False
            return self._loopback < self.loopback_share if is_loopback(addr) else self._lan < self.lan_share

    def opened(self, addr: str) -> None:
        with self._lock:
            self._open[addr] = self._open.get(addr, 0) + 1
            if is_loopback(addr):
                self._loopback += 1
            else:
                self._lan += 1

    def closed(self, addr: str) -> None:
        with self._lock:
            left = self._open.pop(addr, 1) - 1
            if left:
                self._open[addr] = left
            if is_loopback(addr):
                self._loopback -= 1
            else:
                self._lan -= 1


# (method, path, Cookie header) -> the largest body this request may have, in bytes.
BodyLimit = Callable[[str, str, str], int]


class BodyLimitParser(HTTPRequestParser):
    """waitress's request parser, with a body limit decided on each request's headers, where
    waitress checks its Content-Length (a larger one is refused 413 before a byte of the body is
    read) and counts a chunked body as it arrives (cut off at the limit)."""

    def __init__(self, adj: Adjustments, body_limit: BodyLimit):
        super().__init__(adj)
        self.body_limit = body_limit

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        # (waitress's type stubs call command bytes and know no path: both are decoded text here.)
        limit = self.body_limit(self.command, self.path, self.headers.get("COOKIE", ""))  # type: ignore[arg-type, attr-defined]
        # waitress reads both checks' limit from its adjustments: this request gets its own.
        self.adj = copy.copy(self.adj)
        self.adj.max_request_body_size = limit + 1  # waitress refuses a body of exactly this size


class HomeworkChannel(HTTPChannel):
    """A connection that is counted against its client's allowance and must send each request
    by a deadline: `request_seconds` from its first byte, plus time for a large body."""

    server: HomeworkServer

    def __init__(self, server: HomeworkServer, sock, addr, adj, map=None):
        self.parser_class = partial(BodyLimitParser, body_limit=server.body_limit)  # type: ignore[assignment]
        self.client = addr[0]
        self.request_started: float | None = None
        self._timed_request: HTTPRequestParser | None = None
        server.book.opened(self.client)
        super().__init__(server, sock, addr, adj, map)

    def received(self, data: bytes) -> bool:
        done = super().received(data)
        if self.request is not self._timed_request:  # a new request began (or none is pending)
            self._timed_request = self.request
            self.request_started = None if self.request is None else time.monotonic()
        return done

    def overdue(self, now: float) -> bool:
        request, started = self.request, self.request_started
        if request is None or started is None:
            return False
        limits = self.server.limits
        return now - started > limits.request_seconds + request.content_length / limits.body_bytes_per_second

    def del_channel(self, map=None) -> None:
        counted = getattr(self, "_fileno", None) in self.server.active_channels  # type: ignore[operator]
        super().del_channel(map)
        if counted:  # close() may come twice; the connection is given back once
            self.server.book.closed(self.client)


class HomeworkServer(TcpWSGIServer):
    """waitress's TCP server, admitting a connection only if its address has room (it is closed
    at once otherwise) and closing connections whose request is late."""

    channel_class = HomeworkChannel

    def __init__(self, application, book: ConnectionBook, body_limit: BodyLimit, limits: ClientLimits, **kw):
        self.book, self.body_limit, self.limits = book, body_limit, limits
        super().__init__(application, **kw)

    def accept(self):
        pair = super().accept()
        if pair is not None and not self.book.has_room(pair[1][0]):
            # Reset rather than close politely: the client learns at once, and no TIME_WAIT is kept.
            pair[0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            pair[0].close()
            return None
        return pair

    def maintenance(self, now) -> None:
        super().maintenance(now)
        late = time.monotonic()
        for channel in list(self.active_channels.values()):  # type: ignore[attr-defined]
            if isinstance(channel, HomeworkChannel) and channel.overdue(late):
                channel.will_close = True


class HeldBackLane(ThreadedTaskDispatcher):
    """The household's worker pool, plus a paced one-thread lane for held-back clients.

    `held_back(method, path, client_address)` is non-zero for a request that will be refused
    429 (security.HeldBack.wait). waitress gives `add_task` a connection whose first queued
    request is the one to run next; it asks again for each following request on it."""

    def __init__(
        self, held_back: Callable[[str, str, str], int], threads: int, per_second: float = HELD_BACK_PER_SECOND
    ):
        super().__init__()
        self.held_back = held_back
        self.interval = 1.0 / per_second
        self.lane = ThreadedTaskDispatcher()
        self.lane.set_thread_count(1)
        self.set_thread_count(threads)
        self._next_turn = 0.0
        self._turn_lock = threading.Lock()

    def add_task(self, task) -> None:
        request = task.requests[0]
        if not request.error and self.held_back(request.command or "", request.path or "", task.addr[0]):
            # The lane's thread only calls service() (and cancel() at shutdown) on what it is given.
            self.lane.add_task(_Paced(task, self))  # type: ignore[arg-type]
        else:
            super().add_task(task)

    def wait_turn(self) -> None:
        with self._turn_lock:
            now = time.monotonic()
            turn = max(now, self._next_turn)
            self._next_turn = turn + self.interval
        time.sleep(turn - now)

    def shutdown(self, cancel_pending: bool = True, timeout: int = 5) -> bool:
        self.lane.shutdown(cancel_pending, timeout)
        return super().shutdown(cancel_pending, timeout)


class _Paced:
    """A held-back connection's next request, run on the lane when its turn comes."""

    def __init__(self, channel, lane: HeldBackLane):
        self.channel, self.lane = channel, lane

    def service(self) -> None:
        self.lane.wait_turn()
        self.channel.service()

    def cancel(self) -> None:
        self.channel.cancel()


def create_server(
    app, listen: list[str], workers: int, max_streams: int, limits: ClientLimits = ClientLimits()
) -> BaseWSGIServer | MultiSocketServer:
    """waitress's create_server for TCP, with our server class on every listening socket."""
    held_back, body_limit = services(app).held_back, services(app).body_limit
    assert held_back is not None and body_limit is not None, "gate.install makes them with the app"
    adj = Adjustments(**waitress_options(listen, workers, max_streams))
    dispatcher = HeldBackLane(held_back.wait, adj.threads)
    book = ConnectionBook(limits.per_address, _share(max_streams), _share(max_streams))
    socket_map: dict = {}
    servers = [
        HomeworkServer(app, book, body_limit, limits, map=socket_map, dispatcher=dispatcher, adj=adj, sockinfo=info)
        for info in adj.listen
    ]
    if len(servers) == 1:
        return servers[0]
    bound = [(s.effective_host, s.effective_port) for s in servers]  # type: ignore[attr-defined]
    return MultiSocketServer(socket_map, adj, bound, dispatcher, servers[-1].log_info)
