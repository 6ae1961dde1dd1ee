"""What the slicer holds for one household, in one object: registering, connecting, disconnecting and
forgetting a household each touch its `HouseholdSession` only."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from . import policy
from .accounting import RuleBook, TokenBucket
from .model import Household


class BatchedWriter:
    """Frames for one peer, handed to its transport together once per event-loop iteration: one
    send per round-robin turn instead of one per frame."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self._frames: list[bytes] = []

    def write(self, frame: bytes) -> None:
        if not self._frames:
            asyncio.get_running_loop().call_soon(self.flush)
        self._frames.append(frame)

    def flush(self) -> None:
        frames, self._frames = self._frames, []
        if frames and not self.writer.is_closing():
            self.writer.write(b"".join(frames))


@dataclass
class Counters:
    messages_in: int = 0
    relayed: int = 0
    refused: int = 0
    malformed: int = 0
    throttled: int = 0
    packet_ins: int = 0
    sessions: int = 0
    flow_mods: int = 0  # served, by either path
    fast_path: int = 0  # of those, checked and translated by the fast path (fastpath.py)


class Connection:
    """One connection of a household's controller, and what it sent that the relay has not served
    yet. Replies to requests sent on it go to it only, never to a later connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.out = BatchedWriter(writer)
        self.inbox: deque[bytes] = deque()
        self.room = asyncio.Event()  # cleared while the inbox is full: its socket is not read
        self.room.set()
        self.closed = False

    def send(self, frame: bytes) -> None:
        if not self.closed:
            self.out.write(frame)

    def close(self) -> None:
        self.closed = True
        self.writer.close()


class HouseholdSession:
    """A household from its registration until it is forgotten: its record, its slice (the policy,
    with the MACs it learnt), its rule book, counters and rate limit, and its controller's connection
    while there is one."""

    def __init__(self, household: Household, shared_ports: frozenset[int], clock: Callable[[], float]):
        self.household = household
        self.shared_ports = shared_ports
        self.clock = clock
        self.slice = policy.Slice(household, shared_ports)
        self.bucket = TokenBucket(household.msg_rate, household.msg_burst, clock)
        self.book = RuleBook()
        self.counters = Counters()
        self.connection: Connection | None = None

    @property
    def connected(self) -> bool:
        return self.connection is not None

    def connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Connection:
        """A new connection of the household's controller replaces the previous one (its NAT mapping
        changed, say), which is closed. The new one starts afresh: no learnt MACs, a full burst."""
        if self.connection is not None:
            self.connection.close()
        self.connection = Connection(reader, writer)
        self.slice = policy.Slice(self.household, self.shared_ports)
        self.bucket = TokenBucket(self.household.msg_rate, self.household.msg_burst, self.clock)
        self.counters.sessions += 1
        return self.connection

    def disconnected(self, connection: Connection) -> bool:
        """The connection ended; True if it was the household's current one (not since replaced)."""
        connection.closed = True
        connection.writer.close()
        if self.connection is not connection:
            return False
        self.connection = None
        return True

    def retarget(self, household: Household) -> None:
        """The registry changed this household's record: the session continues under the new one."""
        previous, self.household = self.slice, household
        self.slice = policy.Slice(household, self.shared_ports)
        if previous.household.ports == household.ports:  # its devices are still behind the same ports
            self.slice.devices.learnt = previous.devices.learnt
        self.bucket.reconfigure(household.msg_rate, household.msg_burst)

    def send(self, frame: bytes) -> None:
        if self.connection is not None:
            self.connection.send(frame)

    def forget(self) -> None:
        """The household left the registry: its connection ends."""
        if self.connection is not None:
            self.connection.close()
            self.connection = None
