"""Socket services that outlive their threads: a supervisor recreates a service whose thread died.

Each service is a socket and the thread serving it. Its loop already makes every per-message
failure cost that message only; this is the net under that net, and what `health` reports.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

LOG = logging.getLogger(__name__)

SUPERVISE_S = 0.5  # how often the supervisor looks at the service threads


class SocketService:
    """One supervised service: a socket and the thread serving it, recreated together."""

    def __init__(self, name: str, open_socket: Callable[[], socket.socket], serve: Callable[[socket.socket], None]):
        self.name, self.open_socket, self.serve = name, open_socket, serve
        self.label = name  # for logs and the thread's name; the supervisor says whose service it is
        self.sock: socket.socket | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = self.open_socket()
        self.thread = threading.Thread(target=self._run, args=(self.sock,), name=self.label, daemon=True)
        self.thread.start()

    def _run(self, sock):
        try:
            self.serve(sock)
        except BaseException:  # the thread ends here either way; say why
            LOG.exception("%s thread died; the supervisor restarts it", self.label)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


class Supervisor:
    def __init__(self, what: str, services: list[SocketService]):
        self.what, self.services = what, services
        for service in services:
            service.label = f"{what}-{service.name}"
        self.restarts = 0
        self._stopping = threading.Event()

    def start(self) -> None:
        for service in self.services:
            try:
                service.start()
            except OSError as exc:  # e.g. its interface is not there yet: the supervisor tries again
                LOG.error("%s could not start: %s", service.label, exc)
        threading.Thread(target=self._supervise, name=f"{self.what}-supervisor", daemon=True).start()

    def stop(self, join_s: float) -> None:
        self._stopping.set()
        for service in self.services:
            if service.thread is not None:
                service.thread.join(join_s)
            if service.sock is not None:
                service.sock.close()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def health(self) -> dict:
        """E.g. {"udp": "running", "tcp": "running", "restarts": 0}."""
        return dict({s.name: "running" if s.running else "stopped" for s in self.services}, restarts=self.restarts)

    def _supervise(self):
        while not self._stopping.wait(SUPERVISE_S):
            for service in self.services:
                if service.running:
                    continue
                try:
                    service.start()
                    self.restarts += 1
                    LOG.warning("%s restarted (%d restarts so far)", service.label, self.restarts)
                except Exception as exc:  # the supervisor itself must not die: try again next round
                    LOG.error("%s could not restart: %s", service.label, exc)
