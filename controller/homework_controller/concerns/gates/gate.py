"""A per-device gate as a plug-in: one of the household's policies about a device that may hold its traffic
for now, may add rules to its flows, keeps its own state (one value per device in the store's `gate_state`,
moved with the device on a merge and deleted with it) and declares its own ws.v1 operations with who may
perform them. `HouseholdControls` builds every gate of `GATES` (`__init__.py`) and asks them beside pauses
and allowances; ws.v1 (`api/operations.py`) and its authority table (`api/authority.py`) read their
operations from them, so a new gate is its module and its line in `GATES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...flows import GateRules
from ...lifecycle import Moves
from ...store import DeviceStore


@dataclass(frozen=True)
class GateOperation:
    """One of a gate's ws.v1 operations: a change to one device (POST /ws.v1/<name>/<mac>, a decision on the
    disk before the answer, which is the device's status)."""

    name: str
    summary: str  # what it does (openapi.yaml)
    what: str  # what a role refused it may not do ("<the role> may not <what>")
    roles: tuple[str, ...]  # who may perform it: roles of `api/authority.py` ("owner", "member", "panel")
    change: Callable[[Any, str], None]  # the change, on the gate, for the device's MAC


class Hold(Moves, Protocol):
    """What pauses, allowances and every plugged-in gate answer about a device."""

    def may_forward(self, mac: str) -> bool:
        """Whether it lets the device's traffic through now (asked whenever its rules are made)."""
        ...

    def hold_of(self, mac: str) -> tuple[str, float | None] | None:
        """Why it holds the device's traffic now (the status' `paused_why`) and until when (None: until
        the household lifts it); None: it does not."""
        ...

    def status_of(self, mac: str) -> dict:
        """Its fields in the device's status."""
        ...

    def tick(self, now: float) -> set[str]:
        """The clock moved on: the devices whose hold changed (their rules follow on the router's tick)."""
        ...


class Gate(Hold, Protocol):
    """A plugged-in gate: built with the store and the clock, named, with its operations and its rules."""

    name: str  # its key in the store's `gate_state` (a class attribute: ws.v1 reads it before any is built)
    operations: tuple[GateOperation, ...]  # a class attribute too

    def __init__(self, store: DeviceStore, clock: Callable[[], float]) -> None: ...

    def rules_of(self, mac: str) -> GateRules | None:
        """What it adds to the device's rules while the device forwards (None: nothing)."""
        ...
