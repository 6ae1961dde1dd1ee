"""Round-robin service of packet-ins, one queue per device (Maestro's lesson).

A device that floods the controller only lengthens its own queue; every other
device's next packet is served after at most one packet from each busy device.
A group (the devices nobody has decided on yet) takes one turn per round for all
its members, which share it round robin: a thousand forged MACs are one busy
"device" to the household's own, not a thousand.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque


class FairQueue:
    """Safe to share between threads: a lock of its own, held for a put or a pop only, so the threads that
    receive frames queue them without waiting for the controller's lock (`fair_serving`)."""

    def __init__(self, per_key_limit: int = 64, limits: dict | None = None):
        """per_key_limit: each key's (or group member's) queue length; limits: other lengths for some."""
        self.per_key_limit = per_key_limit
        self.limits = limits or {}
        self._queues: OrderedDict[object, deque | OrderedDict[object, deque]] = OrderedDict()  # a group: by member
        self._lock = threading.Lock()
        self.dropped = 0

    def put(self, key, item, member=None) -> bool:
        """Queue an item under `key` (under its `member`, if the key is a group); False (and counted) if that
        queue is already full."""
        with self._lock:
            queue = self._queue_for(key, member)
            if len(queue) >= self.limits.get(key if member is None else member, self.per_key_limit):
                self.dropped += 1
                return False
            queue.append(item)
            return True

    def _queue_for(self, key, member) -> deque:
        if member is None:
            queue = self._queues.setdefault(key, deque())
            assert isinstance(queue, deque), f"{key!r} is a group: put into it with a member"
            return queue
        group = self._queues.setdefault(key, OrderedDict())
        assert isinstance(group, OrderedDict), f"{key!r} is a device's queue, not a group"
        return group.setdefault(member, deque())

    def pop(self):
        """The next item in round-robin order over keys (and over a group's members, within its turn); raises
        IndexError when empty."""
        with self._lock:
            if not self._queues:
                raise IndexError("pop from an empty FairQueue")
            key, queue = next(iter(self._queues.items()))
            if isinstance(queue, OrderedDict):
                member, inner = next(iter(queue.items()))
                item = inner.popleft()
                if inner:
                    queue.move_to_end(member)
                else:
                    del queue[member]
            else:
                item = queue.popleft()
            if queue:
                self._queues.move_to_end(key)
            else:
                del self._queues[key]
            return item

    def __len__(self) -> int:
        with self._lock:
            return sum(
                sum(len(q) for q in queue.values()) if isinstance(queue, OrderedDict) else len(queue)
                for queue in self._queues.values()
            )

    def __bool__(self) -> bool:
        return bool(self._queues)
