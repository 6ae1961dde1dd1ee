"""Round-robin service of packet-ins, one queue per device (Maestro's lesson).

A device that floods the controller only lengthens its own queue; every other
device's next packet is served after at most one packet from each busy device.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque


class FairQueue:
    """Safe to share between threads: a lock of its own, held for a put or a pop only, so the threads that
    receive frames queue them without waiting for the controller's lock (`fair_serving`)."""

    def __init__(self, per_key_limit: int = 64, limits: dict | None = None):
        """per_key_limit: each key's queue length; limits: other lengths for some keys."""
        self.per_key_limit = per_key_limit
        self.limits = limits or {}
        self._queues: OrderedDict[object, deque] = OrderedDict()
        self._lock = threading.Lock()
        self.dropped = 0

    def put(self, key, item) -> bool:
        """Queue an item; False (and counted) if that key's queue is already full."""
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = deque()
            if len(queue) >= self.limits.get(key, self.per_key_limit):
                self.dropped += 1
                return False
            queue.append(item)
            return True

    def pop(self):
        """The next item in round-robin order over keys; raises IndexError when empty."""
        with self._lock:
            if not self._queues:
                raise IndexError("pop from an empty FairQueue")
            key, queue = next(iter(self._queues.items()))
            item = queue.popleft()
            if queue:
                self._queues.move_to_end(key)
            else:
                del self._queues[key]
            return item

    def __len__(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def __bool__(self) -> bool:
        return bool(self._queues)
