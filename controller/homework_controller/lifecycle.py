"""What every concern of the router answers (`HomeRouter` composes them, as Faucet's `Valve` its managers).

A concern owns its state about devices and never imports another concern; events that touch
several are sequenced by `HomeRouter`. Whatever else a concern does, it can say whether it holds
anything about a device and forget it, so forgetting a device (a pending one making way for a
newcomer) reaches everything the router keeps about it.

A device that joins with its own Wi-Fi passphrase under a new MAC (a phone's private address) is the
same device: the concerns that hold the household's word about it (`Moves`: its record, its DNS
rules, its passphrase, its pauses and allowances) move that to the new MAC, on the disk too; the
others hold what was seen of the old MAC on the air and forget it.

Three phases span every device, and a concern takes part in those it has a word in: `SwitchReady` (the
switch (re)connected, holding nothing), `Ticks` (the clock) and `Reports` (its fields in a device's
status). `HomeRouter` keeps one ordered tuple of the concerns in each and loops over it.
"""

from __future__ import annotations

from collections.abc import Collection, MutableMapping, MutableSet
from dataclasses import dataclass
from typing import Protocol

from .effects import Effect


class Concern(Protocol):
    def knows(self, mac: str) -> bool:
        """Whether it holds anything about the device."""
        ...

    def forget(self, mac: str) -> None:
        """The device is gone: drop everything about it (from the disk too, if it keeps any there)."""
        ...


class Moves(Concern, Protocol):
    def move(self, old_mac: str, new_mac: str) -> None:
        """The device now uses `new_mac`: what it holds about `old_mac` is about `new_mac` (the disk is
        the registry's to move, in one go for every table)."""
        ...


def move_key(old: str, new: str, *memories: MutableMapping | MutableSet) -> None:
    """What each dict or set holds under `old`, under `new` (for a concern's `move`)."""
    for memory in memories:
        if old not in memory:
            continue
        if isinstance(memory, MutableMapping):
            memory[new] = memory.pop(old)
        else:
            memory.discard(old)
            memory.add(new)


@dataclass(frozen=True)
class SwitchFacts:
    """The switch that (re)connected: where devices are (one port: the radio's), the router's MAC, and
    the access ports without link."""

    access_ports: tuple[int, ...]
    router_mac: str
    without_link: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Ticked:
    """What a concern's clock tick asks of the router: effects to carry out, the devices whose rules are to
    be reconciled (changed only if they differ) or reinstalled (under their cookie, whatever the switch
    holds), and the devices whose lease ran out (the registry's word; a device's port binding ends with it)."""

    effects: tuple[Effect, ...] = ()
    reconcile: Collection[str] = ()
    reinstall: Collection[str] = ()
    leases_ended: tuple[str, ...] = ()


NOTHING_TICKED = Ticked()


class SwitchReady(Protocol):
    def switch_ready(self, switch: SwitchFacts) -> list[Effect]:
        """The switch holds nothing: what this concern knew of it is gone; the rules it needs, from scratch."""
        ...


class Ticks(Protocol):
    def tick(self, now: float) -> Ticked:
        """What the passing of time changed."""
        ...


class Reports(Protocol):
    def status_of(self, mac: str) -> dict:
        """Its fields in the device's status (ws.v1 `status`)."""
        ...
