"""What the ISP says about each household: the registry's record, validated."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, replace
from typing import Any

MAX_SLOT = 0xFFFFFF  # slots live in the top 24 bits of a rule's cookie
ON_DISCONNECT = ("keep", "delete")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
# What an ISP delegates to a household (RFC 4291's global unicast; documentation's 2001:db8::/32 too).
# Link-local and multicast addresses are every household's at once: the one claiming them would get
# its neighbours' neighbour discovery.
IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class InvalidHousehold(ValueError):
    pass


@dataclass(frozen=True)
class Household:
    """One household's slice.

    `slot` numbers the household's id ranges on the switch (cookies, meters, groups, queues,
    tc classes); it is assigned once by the registry and never reused while the household exists.
    `macs` are the Ethernet addresses of its CPE (its router's uplink side): the only source and
    destination MACs, beside those the slicer learns on its private ports, that its rules may write
    and its packet-outs may carry. `addresses` are its IPv4 prefixes and its IPv6 ones (the prefix
    the ISP delegated to it, e.g. a /56: its devices' global addresses are inside it, no NAT66).
    `cert_sha256` is the SHA-256 of its controller's client
    certificate (DER, hex); `source_address` identifies it on a plain-TCP listener, which exists
    only when configured for tests.
    """

    name: str
    slot: int
    addresses: tuple[Network, ...]
    guaranteed_mbit: float = 10.0
    flow_quota: int = 1000
    msg_rate: float = 500.0
    msg_burst: int = 1000
    cert_sha256: str = ""
    source_address: str = ""
    ports: tuple[int, ...] = field(default=())
    macs: tuple[str, ...] = field(default=())
    on_disconnect: str = "keep"

    def owns(self, network: Network) -> bool:
        return any(network.version == own.version and network.subnet_of(own) for own in self.addresses)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "slot": self.slot,
            "addresses": [str(a) for a in self.addresses],
            "guaranteed_mbit": self.guaranteed_mbit,
            "flow_quota": self.flow_quota,
            "msg_rate": self.msg_rate,
            "msg_burst": self.msg_burst,
            "cert_sha256": self.cert_sha256,
            "source_address": self.source_address,
            "ports": list(self.ports),
            "macs": list(self.macs),
            "on_disconnect": self.on_disconnect,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Household:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise InvalidHousehold(f"unknown household fields: {sorted(unknown)}")
        try:
            addresses = tuple(ipaddress.ip_network(a) for a in data.get("addresses", ()))
            household = cls(
                name=str(data["name"]),
                slot=int(data.get("slot", 0)),
                addresses=addresses,
                guaranteed_mbit=float(data.get("guaranteed_mbit", 10.0)),
                flow_quota=int(data.get("flow_quota", 1000)),
                msg_rate=float(data.get("msg_rate", 500.0)),
                msg_burst=int(data.get("msg_burst", 1000)),
                cert_sha256=str(data.get("cert_sha256", "")).lower().replace(":", ""),
                source_address=str(data.get("source_address", "")),
                ports=tuple(int(p) for p in data.get("ports", ())),
                macs=tuple(str(m).lower().replace("-", ":") for m in data.get("macs", ())),
                on_disconnect=str(data.get("on_disconnect", "keep")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidHousehold(f"bad household record: {exc}") from None
        household.validate()
        return household

    def with_slot(self, slot: int) -> Household:
        return replace(self, slot=slot)

    def validate(self) -> None:
        if not _NAME.match(self.name):
            raise InvalidHousehold(f"name {self.name!r}: lower-case letters, digits and '-', at most 32")
        if not 0 <= self.slot <= MAX_SLOT:
            raise InvalidHousehold(f"slot {self.slot} out of range")
        if not self.addresses:
            raise InvalidHousehold("a household needs at least one address")
        if self.guaranteed_mbit <= 0 or self.flow_quota < 0 or self.msg_rate <= 0 or self.msg_burst < 1:
            raise InvalidHousehold("rates, quota and burst must be positive")
        if self.on_disconnect not in ON_DISCONNECT:
            raise InvalidHousehold(f"on_disconnect must be one of {ON_DISCONNECT}")
        for net in self.addresses:
            if isinstance(net, ipaddress.IPv6Network) and not net.subnet_of(IPV6_GLOBAL_UNICAST):
                raise InvalidHousehold(f"address {net}: an IPv6 prefix of a household is global unicast (2000::/3)")
        if self.source_address:
            ipaddress.ip_address(self.source_address)
        for mac in self.macs:
            if not _MAC.match(mac) or int(mac[:2], 16) & 1:
                raise InvalidHousehold(f"mac {mac!r}: a unicast Ethernet address like 02:00:5e:10:00:01")


def check_disjoint(households: list[Household]) -> None:
    """Two households may share neither an address, a slot, a certificate, a MAC nor a private port."""
    seen_nets: list[tuple[Network, str]] = []
    seen: dict[tuple[str, object], str] = {}
    for h in households:
        for net in h.addresses:
            for other_net, other in seen_nets:
                if net.overlaps(other_net):
                    raise InvalidHousehold(f"{h.name}: {net} overlaps {other}'s {other_net}")
            seen_nets.append((net, h.name))
        keys: list[tuple[str, object]] = [("slot", h.slot), *(("port", p) for p in h.ports)]
        keys += [("mac", m) for m in h.macs]
        keys += [("certificate", h.cert_sha256)] if h.cert_sha256 else []
        keys += [("source address", h.source_address)] if h.source_address else []
        for key in keys:
            if key in seen:
                raise InvalidHousehold(f"{h.name}: {key[0]} {key[1]} already belongs to {seen[key]}")
            seen[key] = h.name
