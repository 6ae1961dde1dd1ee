"""What the controller sends (DHCP answers, OpenFlow messages), sent in the order decided by a thread of its own.

Decisions are made under the controller's lock, and what they send is not sent there: a send is a system call,
or a wait on os-ken's send queue and its locks, and either lets go of the GIL, which the holder then waits to get
back behind the controller's other busy threads. In the hostile bench's lease-completing storm a DHCP answer's
send held the lock 9-12 ms (0.3 ms of it on a CPU), and once answers had left, handing a rule change to os-ken
held it 11 ms (0.1 ms on a CPU), while every device's DHCP and DNS waited. `Outbox.put` makes no system call
and takes no lock another thread holds for long.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

LOG = logging.getLogger(__name__)

Item = TypeVar("Item")


def call(send: Callable[[], object]) -> None:
    """An outbox's `send` whose items are the sends themselves (what goes to the switch: `switch_connection.py`)."""
    send()


class Outbox(Generic[Item]):
    """Items sent by `send` on a thread of their own (started with the first), in the order put.

    limit: at most this many wait; beyond, one is dropped and counted (`dropped`), for what may be lost like a
    frame on a wire (a DHCP answer: its client asks again). None: nothing is dropped (rule changes: the caller
    keeps the queue short, `SwitchConnection.room`)."""

    def __init__(self, send: Callable[[Item], None], name: str, limit: int | None = None):
        self._send, self.name, self.limit = send, name, limit
        self._waiting: queue.SimpleQueue[Item] = queue.SimpleQueue()  # C: its put never lets go of the GIL
        self.dropped = 0
        # Items put and items sent, so far. Only the sender thread writes `_sent`; `_put` is counted under a lock
        # of its own, which only putters take (mostly one at a time: the controller's lock holder).
        self._put = self._sent = 0
        self._counting = threading.Lock()
        self._sender: threading.Thread | None = None
        self._starting = threading.Lock()

    def put(self, item: Item) -> None:
        if self.limit is not None and self._waiting.qsize() >= self.limit:
            self.dropped += 1
            return
        with self._counting:
            self._put += 1
        self._waiting.put(item)
        if self._sender is None:
            self._start()

    def __len__(self) -> int:
        """How many are not sent yet: waiting, or being sent. Never fewer than the caller's own (it may count one
        just sent): an item put by this thread and not yet sent is counted."""
        return self._put - self._sent

    def _start(self) -> None:
        with self._starting:
            if self._sender is None:
                self._sender = threading.Thread(target=self._send_in_order, name=self.name, daemon=True)
                self._sender.start()

    def _send_in_order(self) -> None:
        while True:
            item = self._waiting.get()
            try:
                self._send(item)
            except Exception:  # a bug costs this item, not the ones after it
                LOG.exception("%s: not sent", self.name)
            self._sent += 1
