"""The per-device gates plugged into the household's controls (`gate.Gate`): each is one module, and its
line here is all that plugs it in: `HouseholdControls` asks it, ws.v1 offers its operations, the authority
table grants them, the store keeps its state."""

from __future__ import annotations

from .gate import Gate, GateOperation, Hold
from .internet_only import InternetOnly

GATES: tuple[type[Gate], ...] = (InternetOnly,)

__all__ = ["GATES", "Gate", "GateOperation", "Hold"]
