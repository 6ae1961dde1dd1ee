"""Rule changes held back behind DHCP answers, and whose turn it is: pure (a clock is passed in).

A hundred devices asking for an address at once (a power cut) each bring four rules and a meter:
about 1 ms of os-ken encoding, and as much again in OVS's single thread, which also forwards their
frames. So answers go first and the changes they bring wait until no DHCP frame has come for
`quiet_s`; once the oldest has waited `max_age_s`, answers and held changes take turns, so neither
waits for the other to run out. The changes leave in the order they were decided (meter ids are
reused when a device is forgotten, so the order matters).
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from ...effects import RuleChange

ANSWER, SEND = "answer", "send"


@dataclass(frozen=True)
class Wait:
    """Nothing to answer, and the devices are not quiet yet: look again in `seconds`."""

    seconds: float


class HeldChanges:
    def __init__(
        self,
        max_age_s: float = 0.5,
        quiet_s: float = 0.03,
        per_turn: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_age_s, self.quiet_s, self.per_turn, self.clock = max_age_s, quiet_s, per_turn, clock
        self._held: deque[tuple[float, RuleChange, str]] = deque()  # (when decided, change, whose frame brought it)
        self._from: Counter[str] = Counter()  # how many held changes each device's frames brought
        self._answered_last = False
        self._last_answer_at = float("-inf")

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, change: RuleChange, source: str = "") -> None:
        """source: the MAC whose frame brought the change ("": none did)."""
        self._held.append((self.clock(), change, source))
        self._from[source] += 1

    def holds_from(self, source: str) -> bool:
        """Whether a change that `source`'s frames brought is still held (its own rules may be among them)."""
        return self._from[source] > 0

    def answering(self) -> None:
        """A DHCP frame is being answered now: the devices are not quiet."""
        self._last_answer_at = self.clock()

    def oldest(self, limit: int) -> list[RuleChange]:
        """The oldest `limit` held changes, left held (`take_oldest` takes them once they are encoded)."""
        return [change for _, change, _ in itertools.islice(self._held, limit)]

    def take_oldest(self, changes: list[RuleChange]) -> bool:
        """Take `changes` if they are still the oldest held (what `oldest` gave), else nothing: meanwhile the
        held changes may have been sent, or cleared for the switch's whole rule set."""
        if len(changes) > len(self._held) or any(
            change is not held for change, (_, held, _) in zip(changes, self._held, strict=False)
        ):
            return False
        self.take(len(changes))
        return True

    def take(self, limit: int | None = None) -> list[RuleChange]:
        """The oldest held changes, in the order they were decided (all of them without a limit)."""
        count = len(self._held) if limit is None else min(limit, len(self._held))
        taken = [self._held.popleft() for _ in range(count)]
        self._from.subtract(source for _, _, source in taken)
        self._from = +self._from  # no zero counts left: one entry per device with changes held, at most
        return [change for _, change, _ in taken]

    def clear(self) -> None:
        self._held.clear()
        self._from.clear()

    def next_turn(self, frames_waiting: bool) -> str | Wait | None:
        """ANSWER the next waiting frame, SEND `per_turn` held changes, Wait, or None: nothing to do."""
        now = self.clock()
        overdue = bool(self._held) and now - self._held[0][0] > self.max_age_s
        if frames_waiting and not (overdue and self._answered_last):
            self._answered_last = True
            return ANSWER
        self._answered_last = False
        if not self._held:
            return None
        quiet_in = self._last_answer_at + self.quiet_s - now
        if quiet_in > 0 and not overdue:
            return Wait(quiet_in)
        return SEND
