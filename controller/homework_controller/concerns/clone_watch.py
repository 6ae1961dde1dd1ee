"""Watching for a copied MAC, the concern: the DHCP client that took each live lease, what the
household should look at, and when it was last told (`fingerprints` compares, pure).

A permitted device's client is kept on the disk too (a look-alike newcomer is compared with it,
`lookalikes.py`, after a restart as before); the rest is in memory: after a restart the first DHCP
client of a live lease of a device with none on the disk is taken for its holder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..effects import Effect, TellHousehold
from ..model import Device, State
from ..policy import dhcp, fingerprints
from ..wire import dhcp_wire

LOG = logging.getLogger(__name__)


class CloneWatch:
    def __init__(self, store, clock: Callable[[], float], counters: dict[str, int]):
        self.store, self.clock, self.counters = store, clock, counters
        self.kept = {mac: fingerprints.Fingerprint(*fields) for mac, fields in store.load_fingerprints().items()}
        self.fingerprints: dict[str, fingerprints.Fingerprint] = dict(self.kept)
        self.suspected: dict[str, fingerprints.Suspicion] = {}
        self.told: dict[str, float] = {}

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self.fingerprints or mac in self.suspected or mac in self.told

    def forget(self, mac: str) -> None:
        for memory in (self.fingerprints, self.suspected, self.told):
            memory.pop(mac, None)
        self._unkeep(mac)

    def fingerprint_of(self, mac: str) -> fingerprints.Fingerprint | None:
        """The DHCP client that took the device's lease, if seen since the household last decided."""
        return self.fingerprints.get(mac)

    def status_of(self, mac: str) -> dict:
        suspicion = self.suspected.get(mac)
        return {"clone_suspected": suspicion.to_json() if suspicion else None}

    # -- events

    def served(
        self, req: dhcp_wire.DhcpRequest, before: Device | None, outcome: dhcp.Outcome, now: float
    ) -> list[Effect]:
        """A DHCP message was served (`dhcp.serve`): from a MAC holding a live lease but not the lease holder's
        client, it is served as the device (refusing would cut off the real one too, and the copier could
        set the address by hand), but the device's name and class stay the holder's, and it is suspected;
        a granted lease's client is the holder from now on. What the household is told."""
        told: list[Effect] = []
        differs = self.differences(before.mac, req) if before is not None and before.lease_active(now) else []
        if differs and before is not None and outcome.device is not None:
            outcome.device = outcome.device.with_(hostname=before.hostname, vendor_class=before.vendor_class)
            told = self.suspect(req.chaddr, differs, before.label)
        if outcome.lease_action == "granted":
            self.record_lease_holder(req.chaddr, req)
        self._keep(req.chaddr, outcome.device)
        return told

    def _keep(self, mac: str, device: Device | None) -> None:
        """A permitted device's client goes to the disk when it changed (a write queued, not made here)."""
        seen = self.fingerprints.get(mac)
        if device is not None and device.state is State.PERMITTED and seen is not None and self.kept.get(mac) != seen:
            self.kept[mac] = seen
            self.store.save_fingerprint(mac, tuple(getattr(seen, field) for field, _ in fingerprints.FIELDS))

    def _unkeep(self, mac: str) -> None:
        if self.kept.pop(mac, None) is not None:
            self.store.save_fingerprint(mac, None)

    def record_lease_holder(self, mac: str, req: dhcp_wire.DhcpRequest) -> None:
        """A lease was granted: its DHCP client is the device's from now on."""
        self.fingerprints[mac] = fingerprints.Fingerprint.of(req)

    def differences(self, mac: str, req: dhcp_wire.DhcpRequest) -> list[str]:
        """How a message from a MAC that holds a live lease differs from the lease holder's DHCP client."""
        if req.msg_type not in (dhcp_wire.DISCOVER, dhcp_wire.REQUEST):
            return []  # RELEASE and DECLINE carry less; INFORM (Windows: WPAD) asks for other options
        seen = fingerprints.Fingerprint.of(req)
        # After a restart the first sender is taken for the holder.
        return fingerprints.differences(self.fingerprints.setdefault(mac, seen), seen)

    def suspect(self, mac: str, differs: list[str], label: str) -> list[Effect]:
        """Shown in the device's status until the household decides about it; the household told now (at
        most every few minutes). label: what the household calls the device."""
        now = self.clock()
        self.counters["mac_clone_suspected"] += 1
        self.suspected[mac] = fingerprints.Suspicion(now, tuple(differs))
        LOG.warning("%s is in use by a second device: %s", mac, "; ".join(differs))
        last = self.told.get(mac)
        if last is not None and now - last < fingerprints.CLONE_EVENT_INTERVAL_S:
            return []
        self.told[mac] = now
        message = f"{label}: its address {mac} is being used by another device too ({'; '.join(differs)})"
        return [TellHousehold("mac-clone", mac, message)]

    def household_decided(self, mac: str) -> None:
        """The household has looked at the device: its next DHCP client is taken for its own (after an
        OS update, say, it is no longer reported at every renewal)."""
        self.suspected.pop(mac, None)
        self.fingerprints.pop(mac, None)
        self._unkeep(mac)
