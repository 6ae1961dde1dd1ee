"""How the web UI is served: waitress, sized so that live streams cannot take the household's
threads, and with clients already held back kept out of the household's way.

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

import threading
import time
from collections.abc import Callable

from waitress.server import BaseWSGIServer, MultiSocketServer
from waitress.server import create_server as waitress_server
from waitress.task import ThreadedTaskDispatcher

from .updates import CHUNK_BYTES

# Answers to held-back requests, router-wide: a held-back client gets its 429 at this pace
# however many connections it uses, and the 429 it gets is all it could get anyway.
HELD_BACK_PER_SECOND = 20.0


def waitress_options(listen: list[str], workers: int, max_streams: int) -> dict:
    """Every live stream holds a thread for as long as the page is open, so the server gets
    one thread per allowed stream on top of `workers` for ordinary requests: however many
    streams are open, sign-in and the API still have their own threads."""
    return {
        "listen": " ".join(listen),
        "threads": workers + max_streams,
        # waitress stops accepting at this many connections: room for every stream besides
        # its default 100 for everything else.
        "connection_limit": 100 + max_streams,
        "ident": "homework-webui",
        "channel_timeout": 60,
        # Keep reading a connection while its request runs, so a live stream learns at once
        # that its page has gone (environ["waitress.client_disconnected"]).
        "channel_request_lookahead": 5,
        # No proxy in front of us: remote_addr must be the real peer for the device-access
        # rule, so waitress trusts no forwarding headers.
        "clear_untrusted_proxy_headers": True,
        # waitress holds a request's whole body (in /tmp beyond 512 KB) before the app can refuse
        # it: no request may be larger than a piece of a firmware update (the largest the API takes).
        "max_request_body_size": CHUNK_BYTES + 1,  # waitress refuses a body of exactly this size
    }


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


def create_server(app, listen: list[str], workers: int, max_streams: int) -> BaseWSGIServer | MultiSocketServer:
    held_back = app.extensions["homework"]["held_back"]
    # `_dispatcher` is create_server's way to bring one's own (in waitress's type stubs too).
    return waitress_server(
        app,
        _dispatcher=HeldBackLane(held_back.wait, workers + max_streams),
        **waitress_options(listen, workers, max_streams),
    )
