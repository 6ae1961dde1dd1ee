"""hwdb access: one client per thread (the client is stop-and-wait), short timeouts so a
dead database turns into a clear error rather than a hung page."""

from __future__ import annotations

import re
import threading

from hwdb_client import HwdbClient, HwdbError

__all__ = ["APP_RE", "PRIORITIES", "Hwdb", "HwdbClient", "HwdbError", "quote"]

PRIORITIES = ("high", "medium", "default")
# App names come from agents and port guesses: allow what such names look like, nothing
# that could confuse a statement or a page.
APP_RE = re.compile(r"^[\w .+:/@()-]{1,64}$")


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Hwdb:
    def __init__(self, host: str, port: int, timeout: float = 2.0):
        self.host, self.port, self.timeout = host, port, timeout
        self._local = threading.local()

    def client(self, timeout: float | None = None) -> HwdbClient:
        return HwdbClient(self.host, self.port, timeout=timeout or self.timeout, max_tries=4)

    def query(self, text: str):
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = self.client()
        try:
            return c.query(text)
        except HwdbError:
            # A timed-out exchange may leave stale datagrams behind: start afresh next time.
            c.close()
            self._local.client = None
            raise

    def priorities(self) -> dict[str, str]:
        latest: dict[str, str] = {}
        for row in self.query("select app, priority from AppPriority").rows:  # time order: last wins
            latest[row["app"]] = row["priority"]
        return latest

    def set_priority(self, app: str, priority: str) -> None:
        self.query(f"insert into AppPriority values ({quote(app)}, {quote(priority)})")
