"""A newcomer that looks like a device the household already decided about, back under a new MAC (a
phone's private address) without a passphrase of its own to say so (issue 23): the same DHCP name and
class as the device, the same DHCP client where both are known, while that device is not on the
network. Pure: the router offers it in the newcomer's status (`looks_like`), the household merges
(`Joining.merge`) or not. A guess among several is no offer, a device on the network now is not
the newcomer, and a device with its own Wi-Fi passphrase proves who it is by joining with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from . import clones
from .model import Device, State


def may_be_merged_into(device: Device, now: float, has_own_passphrase: bool) -> bool:
    """Whether a newcomer may be taken for the device: decided, away, and without a passphrase of its
    own (with one, it says who it is when it joins: a lookalike that joined with the guest's is not
    taken for it on its looks)."""
    return device.state is not State.PENDING and not device.lease_active(now) and not has_own_passphrase


class Lookalikes:
    """The devices a newcomer may be taken for, by DHCP name: built once for a status listing."""

    def __init__(
        self,
        devices: Iterable[Device],
        now: float,
        fingerprint_of: Callable[[str], clones.Fingerprint | None],
        has_own_passphrase: Callable[[str], bool],
    ):
        self.fingerprint_of = fingerprint_of
        self.away: dict[str, list[Device]] = {}
        for device in devices:
            if device.hostname and may_be_merged_into(device, now, has_own_passphrase(device.mac)):
                self.away.setdefault(device.hostname, []).append(device)

    def looks_like(self, newcomer: Device) -> dict | None:
        """The one away device the newcomer looks like ({mac, label}), if the newcomer is pending."""
        if newcomer.state is not State.PENDING or not newcomer.hostname:
            return None
        alike = [d for d in self.away.get(newcomer.hostname, ()) if self._same_client(newcomer, d)]
        if len(alike) != 1:
            return None
        return {"mac": alike[0].mac, "label": alike[0].label}

    def _same_client(self, newcomer: Device, known: Device) -> bool:
        if newcomer.vendor_class != known.vendor_class:
            return False
        seen, was = self.fingerprint_of(newcomer.mac), self.fingerprint_of(known.mac)
        return seen is None or was is None or not clones.differences(was, seen)
