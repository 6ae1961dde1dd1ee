"""What every concern of the router answers (`HomeRouter` composes them, as Faucet's `Valve` its managers).

A concern owns its state about devices and never imports another concern; events that touch
several are sequenced by `HomeRouter`. Whatever else a concern does, it can say whether it holds
anything about a device and forget it, so forgetting a device (a pending one making way for a
newcomer) reaches everything the router keeps about it.

A device that joins with its own Wi-Fi passphrase under a new MAC (a phone's private address) is the
same device: the concerns that hold the household's word about it (`Moves`: its record, its DNS
rules, its passphrase, its pauses and allowances) move that to the new MAC, on the disk too; the
others hold what was seen of the old MAC on the air and forget it.
"""

from __future__ import annotations

from collections.abc import MutableMapping, MutableSet
from typing import Protocol


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
