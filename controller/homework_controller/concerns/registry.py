"""The device registry, the concern: every device the router knows, the /30s in use, which devices
hold a lease, and what of it is on the disk. It also names, once, when a device's traffic is
forwarded now (`forwarding_now`): a permitted device whose lease runs.

What is written: the household's decisions, names, reservations and renewed leases at once; when
a decided device was last seen in a batch every few minutes; a device still waiting for a
decision never (a storm of forged MACs costs the disk nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..effects import LogRow
from ..lifecycle import NOTHING_TICKED, Ticked
from ..model import Device, State
from ..store import DeviceStore, StoreError
from ..wire.dhcp_wire import ZERO_IP
from ..wire.lan import FIRST_DEVICE_SUBNET, SUBNET_COUNT, Subnet

LOG = logging.getLogger(__name__)

SIGHTINGS_WRITE_INTERVAL_S = 300


class NoFreeSubnet(RuntimeError):
    pass


def _is_decision(before: Device | None, device: Device) -> bool:
    """Whether a change is worth the disk: the household's decisions, names and reservations, and
    leases renewed; not when a device was last seen, and nothing of a newcomer still waiting
    (a storm of forged MACs writes nothing). Leases matter after a restart: the controller
    installs a permitted device's rules at once if its lease still runs."""
    if device.state is State.PENDING and not device.name:
        return False
    if before is None:
        return True
    decided = ("state", "subnet", "name", "hostname", "vendor_class", "first_seen")
    return (
        any(getattr(before, f) != getattr(device, f) for f in decided)
        or abs(device.lease_expires - before.lease_expires) > 60
    )


class DeviceRegistry:
    def __init__(
        self,
        store: DeviceStore,
        clock: Callable[[], float],
        counters: dict[str, int],
        owner_of_v6: Callable[[str], str | None],
    ):
        """owner_of_v6: the forwarding device whose /64 holds an IPv6 address (`ipv6.Ipv6.owner_of`: none
        when the router runs no IPv6)."""
        self.store, self.clock, self.counters = store, clock, counters
        self.owner_of_v6 = owner_of_v6
        self.devices: dict[str, Device] = store.load()
        self.used_subnets = {d.subnet.index for d in self.devices.values() if d.subnet}
        self.lowest_free_subnet = FIRST_DEVICE_SUBNET  # no /30 below it is free (a storm allocates in turn)
        self.mac_by_subnet = {d.subnet.index: d.mac for d in self.devices.values() if d.subnet}
        self.leased = {d.mac for d in self.devices.values() if d.lease_active(clock())}
        self.persisted: set[str] = set(self.devices)  # in the store; pending newcomers live in memory
        self.sighted: set[str] = set()  # persisted devices seen since their record was written
        self.earlier: dict[str, tuple[str, ...]] = store.load_earlier_macs()  # a moved device's MACs before
        self.next_sightings_write = clock() + SIGHTINGS_WRITE_INTERVAL_S

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return any(mac in memory for memory in (self.devices, self.leased, self.persisted, self.sighted, self.earlier))

    def status_of(self, mac: str) -> dict:
        """The MACs it had before (the web UI's ownership follows the device through them)."""
        return {"earlier_macs": list(self.earlier.get(mac, ()))}

    def forget(self, mac: str) -> None:
        """The device, its /30 and its lease go, from memory and the disk."""
        device = self.devices.pop(mac, None)
        self.earlier.pop(mac, None)
        self.sighted.discard(mac)
        self.leased.discard(mac)
        if mac in self.persisted:
            self.persisted.discard(mac)
            try:
                self.store.delete(mac)
            except StoreError as exc:
                self.counters["store_errors"] += 1
                LOG.error("%s", exc)
        if device is not None and device.subnet:
            self.used_subnets.discard(device.subnet.index)
            self.lowest_free_subnet = min(self.lowest_free_subnet, device.subnet.index)
            self.mac_by_subnet.pop(device.subnet.index, None)

    def move(self, old_mac: str, new_mac: str) -> None:
        """The device is back under another MAC (its own passphrase said so): its record, /30 and rows
        follow; its lease was the old address's and ended with it (the new one asks for its /30)."""
        device = self.devices.pop(old_mac, None)
        if device is None:
            return
        for memory in (self.leased, self.sighted, self.persisted):
            memory.discard(old_mac)
        moved = device.with_(mac=new_mac, lease_expires=0.0)
        self.devices[new_mac] = moved
        self.earlier[new_mac] = tuple(m for m in (*self.earlier.pop(old_mac, ()), old_mac) if m != new_mac)
        if moved.subnet:
            self.mac_by_subnet[moved.subnet.index] = new_mac
        try:
            self.store.move(old_mac, new_mac)
            self.store.save(moved)
            self.persisted.add(new_mac)
        except StoreError as exc:
            self.counters["store_errors"] += 1
            LOG.error("%s", exc)

    def tick(self, now: float) -> Ticked:
        """When decided devices were last seen, written in one batch every few minutes (not on every
        DHCP message: a storm must not wear the flash). The leases that ran out end, with hwdb's rows."""
        if self.sighted and now >= self.next_sightings_write:
            for mac in self.sighted:
                if mac in self.devices:
                    self._persist(self.devices[mac])
            self.sighted.clear()
            self.next_sightings_write = now + SIGHTINGS_WRITE_INTERVAL_S
        ended = [mac for mac in self.leased if not self.devices[mac].lease_active(now)]
        if not ended:
            return NOTHING_TICKED
        rows = tuple(self.record_lease(self.devices[mac], "expired") for mac in ended)
        return Ticked(effects=rows, leases_ended=tuple(ended))

    # -- queries

    def get(self, mac: str) -> Device | None:
        return self.devices.get(mac)

    def by_ip(self, ip: str) -> Device | None:
        """The device whose /30 holds the address (by the address's /30 index: no scan)."""
        index = Subnet.device_index(ip)
        mac = self.mac_by_subnet.get(index) if index is not None else None
        return self.devices.get(mac) if mac else None

    def forwarding_at_v6(self, *addresses: str) -> Device | None:
        """The forwarding device whose /64 holds the first of the IPv6 addresses (or /64s) that is one's."""
        mac = next((m for m in map(self.owner_of_v6, addresses) if m is not None), None)
        return self.devices[mac] if mac is not None else None

    def device_at(self, address: str) -> Device | None:
        """The device an address in the switch's records is: by its /30, or for IPv6 by its /64."""
        return self.forwarding_at_v6(address) if ":" in address else self.by_ip(address)

    def forwarding_now(self, device: Device) -> bool:
        """Whether the device's traffic is forwarded now: permitted (or whitelisted), with a live lease."""
        return device.forwards and device.lease_active(self.clock())

    def forwarding_at(self, ip: str) -> Device | None:
        """The device at the address, if its traffic is forwarded now."""
        device = self.by_ip(ip)
        return device if device is not None and self.forwarding_now(device) else None

    def answerable_at(self, ip: str) -> Device | None:
        """The device at the address if it holds a live lease and is not refused: the router's stack may
        answer it (held back, its rules let only its DNS and the portal through: `flows.portal_rules`)."""
        device = self.by_ip(ip)
        if device is None or device.state in (State.DENIED, State.BLACKLISTED) or not device.lease_active(self.clock()):
            return None
        return device

    def arp_answered_for(self, ip: str) -> Device | None:
        """The device the router's stack is told is at `ip` when it asks (proxy ARP): one that forwards,
        or one held back that it may answer."""
        return self.forwarding_at(ip) or self.answerable_at(ip)

    def asks_for_its_gateway(self, mac: str, sender_mac: str, sender_ip: str, target_ip: str) -> bool:
        """Whether an ARP request from `mac` is a device the router answers (pending or permitted, with a
        /30) asking for its own gateway, as itself: its own MAC, its own address or none yet (0.0.0.0)."""
        device = self.devices.get(mac)
        return (
            device is not None
            and device.subnet is not None
            and sender_mac == mac
            and device.state in (State.PENDING, State.PERMITTED)
            and sender_ip in (device.subnet.device_ip, ZERO_IP)
            and target_ip == device.subnet.gateway
        )

    def pending(self) -> list[Device]:
        return [d for d in self.devices.values() if d.state is State.PENDING]

    def leases_status(self) -> list[dict]:
        """Every live lease, by /30 (ws.v1 dhcp-status)."""
        now = self.clock()
        leased = sorted(
            (d for d in self.devices.values() if d.subnet and d.lease_active(now)),
            key=lambda d: d.subnet.index if d.subnet else 0,
        )
        return [
            {
                "mac": d.mac,
                "ip": d.subnet.device_ip if d.subnet else None,
                "state": d.state.value,
                "hostname": d.hostname,
                "lease_expires": d.lease_expires,
                "lease_seconds_left": max(0, int(d.lease_expires - now)),
            }
            for d in leased
        ]

    def blacklisted(self) -> list[str]:
        return sorted(d.mac for d in self.devices.values() if d.state is State.BLACKLISTED)

    # -- changes

    def record(self, device: Device) -> None:
        """A device as it is now: kept, and written if the change is worth the disk."""
        before = self.devices.get(device.mac)
        self.devices[device.mac] = device
        if device.subnet:
            self.mac_by_subnet[device.subnet.index] = device.mac
        if _is_decision(before, device):
            self._persist(device)
        elif device.mac in self.persisted and before != device:
            self.sighted.add(device.mac)  # written with the next batch of sightings

    def record_lease(self, device: Device, action: str) -> LogRow:
        """A lease granted, renewed, released or expired; hwdb's Leases table gets its row."""
        if action in ("released", "expired"):
            self.leased.discard(device.mac)
        else:
            self.leased.add(device.mac)
        assert device.subnet is not None, "a lease is always of the device's /30"
        return LogRow("Leases", (device.mac, device.subnet.device_ip, device.hostname, action, device.state.value))

    def allocate_subnet(self) -> Subnet:
        for index in range(self.lowest_free_subnet, SUBNET_COUNT):
            if index not in self.used_subnets:
                self.used_subnets.add(index)
                self.lowest_free_subnet = index + 1
                return Subnet(index)
        raise NoFreeSubnet("all /30s in 10.2.0.0/16 are taken")

    def _persist(self, device: Device) -> None:
        try:
            self.store.save(device)
            self.persisted.add(device.mac)
        except StoreError as exc:
            # Keep serving from memory: a full disk must not take the network down.
            self.counters["store_errors"] += 1
            LOG.error("%s", exc)
