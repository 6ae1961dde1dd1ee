"""What every concern of the router answers (`HomeRouter` composes them, as Faucet's `Valve` its managers).

A concern owns its state about devices and never imports another concern; events that touch
several are sequenced by `HomeRouter`. Whatever else a concern does, it can say whether it holds
anything about a device and forget it, so forgetting a device (a pending one making way for a
newcomer) reaches everything the router keeps about it.
"""

from __future__ import annotations

from typing import Protocol


class Concern(Protocol):
    def knows(self, mac: str) -> bool:
        """Whether it holds anything about the device."""
        ...

    def forget(self, mac: str) -> None:
        """The device is gone: drop everything about it (from the disk too, if it keeps any there)."""
        ...
