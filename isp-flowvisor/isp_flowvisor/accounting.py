"""Per-household quotas and rate limits, and the shadow of each household's rules.

Plain classes with an injected clock; the relay calls them, tests drive them directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class TokenBucket:
    """Control messages a household may send: `rate` per second, bursts up to `burst`."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]):
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()

    def reconfigure(self, rate: float, burst: int) -> None:
        self._refill()
        self.rate, self.burst = rate, burst
        self._tokens = min(self._tokens, float(burst))

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def available(self) -> int:
        self._refill()
        return int(self._tokens)

    def take(self, n: int = 1) -> None:
        self._tokens -= n

    def seconds_until_available(self) -> float:
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate


class RuleBook:
    """What the slicer believes a household has installed: rule key -> the physical flow-mod.

    The count is what the quota limits. Adds and strict deletes are exact; wide deletes and
    modifies mark the book stale until a flow dump from the switch replaces it. The switch takes
    messages in order, so a dump shows everything relayed before it was asked for and nothing
    after: changes relayed after `dump_asked` are kept aside and laid over the dump in
    `dump_arrived` (otherwise rules added in that window would vanish from the book, and the
    household could reach about twice its quota). The stored flow-mods let the slicer put a
    household's rules back on a switch that lost them.
    """

    def __init__(self) -> None:
        self.rules: dict[tuple, bytes] = {}
        self.stale = False
        self._wide_changes = 0  # wide deletes and modifies so far
        self._since_dump: dict[int, dict[tuple, bytes | None]] = {}  # per dump asked for: what changed since

    def __len__(self) -> int:
        return len(self.rules)

    def would_exceed(self, key: tuple, quota: int) -> bool:
        return key not in self.rules and len(self.rules) >= quota

    def _note(self, key: tuple, flow_mod: bytes | None) -> None:
        for changes in self._since_dump.values():
            changes[key] = flow_mod

    def add(self, key: tuple, flow_mod: bytes) -> None:
        self.rules[key] = flow_mod
        if self._since_dump:  # rarely: a dump is on its way (one add per relayed flow-mod)
            self._note(key, flow_mod)

    def modify_strict(self, key: tuple, flow_mod: bytes) -> None:
        if key in self.rules:
            self.rules[key] = flow_mod
            self._note(key, flow_mod)

    def remove(self, key: tuple) -> None:
        self.rules.pop(key, None)
        self._note(key, None)

    def changed_widely(self) -> None:
        """A wide delete or modify went to the switch: only a dump asked for after it tells the truth."""
        self._wide_changes += 1
        self.stale = True

    def dump_asked(self) -> int:
        """Call as the dump request goes to the switch; pass the result to `dump_arrived`."""
        self._since_dump[self._wide_changes] = {}
        return self._wide_changes

    def dump_arrived(self, asked: int, entries: Iterable[tuple[tuple, bytes]]) -> None:
        changes = self._since_dump.pop(asked, {})
        if asked != self._wide_changes:
            return  # a later wide change: the dump asked for after it will tell
        rules = dict(entries)
        for key, flow_mod in changes.items():
            if flow_mod is None:
                rules.pop(key, None)
            else:
                rules[key] = flow_mod
        self.rules = rules
        self.stale = False

    def dump_failed(self, asked: int) -> None:
        self._since_dump.pop(asked, None)

    def replace(self, entries: Iterable[tuple[tuple, bytes]]) -> None:
        self.rules = dict(entries)
        self.stale = False
