"""A newcomer that looks like a device the household let in, back under a new MAC (a phone's private
address) without a passphrase of its own to say so (issue 23): the same DHCP host name, and the whole
DHCP client alike (issue 39: the client identifier, the options it asks for in their order and the
vendor class, each the same, present in both or in neither, and the options present: a host name
alone is anyone's to send), while that device is not on the network. The device's client is the one
that took its last lease, kept on the disk (`CloneWatch`), so a restart changes nothing. Pure: the
router offers it in the newcomer's status (`looks_like`, with what matched) and says of a device with
that name whose client differs how (`resembles`); the household merges (`Joining.merge`, only into the
device offered) or not. A guess among several is no offer, a device on the network now is not the
newcomer, a denied or blacklisted device is never offered (a merge would lift its block), and a device
with its own Wi-Fi passphrase proves who it is by joining with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..model import Device, State
from ..policy import fingerprints


def may_be_merged_into(device: Device, now: float, has_own_passphrase: bool) -> bool:
    """Whether a newcomer may be taken for the device: permitted (a denied or blacklisted one's decision
    would move off its MAC onto the newcomer's), away, and without a passphrase of its own (with one,
    it says who it is when it joins: a lookalike that joined with the guest's is not taken for it on
    its looks)."""
    return device.state is State.PERMITTED and not device.lease_active(now) and not has_own_passphrase


class Lookalikes:
    """The devices a newcomer may be taken for, by DHCP name: built once for a status listing."""

    def __init__(
        self,
        devices: Iterable[Device],
        now: float,
        fingerprint_of: Callable[[str], fingerprints.Fingerprint | None],
        has_own_passphrase: Callable[[str], bool],
    ):
        self.fingerprint_of = fingerprint_of
        self.away: dict[str, list[Device]] = {}
        for device in devices:
            if device.hostname and may_be_merged_into(device, now, has_own_passphrase(device.mac)):
                self.away.setdefault(device.hostname, []).append(device)

    def status_of(self, newcomer: Device) -> dict:
        """The newcomer's `looks_like`: the one away device it is offered as ({mac, label, matched}), and
        `resembles`: the one away device with its host name whose DHCP client differs ({mac, label, matched,
        differs}), not offered. Both None for a device that is not pending."""
        if newcomer.state is not State.PENDING or not newcomer.hostname:
            return {"looks_like": None, "resembles": None}
        compared = [(d, *self._compared(newcomer, d)) for d in self.away.get(newcomer.hostname, ())]
        alike = [(d, matched) for d, matched, differs in compared if not differs]
        unlike = [(d, matched, differs) for d, matched, differs in compared if differs]
        offer = None
        if len(alike) == 1:
            offer = {"mac": alike[0][0].mac, "label": alike[0][0].label, "matched": alike[0][1]}
        near = None
        if not alike and len(unlike) == 1:
            device, matched, differs = unlike[0]
            near = {"mac": device.mac, "label": device.label, "matched": matched, "differs": differs}
        return {"looks_like": offer, "resembles": near}

    def looks_like(self, newcomer: Device) -> dict | None:
        return self.status_of(newcomer)["looks_like"]

    def _compared(self, newcomer: Device, known: Device) -> tuple[list[str], list[str]]:
        """What of the two DHCP clients matched and what differs; a client the router holds no fingerprint
        of, or one that asks for no options, proves nothing."""
        seen, was = self.fingerprint_of(newcomer.mac), self.fingerprint_of(known.mac)
        if seen is None or was is None:
            return [], [f"no DHCP client of {'this newcomer' if seen is None else known.label} on record"]
        matched, differs = fingerprints.compared(was, seen)
        if not seen.parameter_list and not was.parameter_list:  # two clients alike in leaving them out
            differs.append("no requested options to compare")
        return matched, differs
