"""The home's IPv6 prefix plan, pure: a ULA /48 that always exists, the prefix the ISP delegates when one is
known, each device's /64s numbered as its /30, and the router's address in each (see the concern
`concerns/ipv6.py` for how devices get them, `edge/lan/ipv6_files.py` for where they are kept)."""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass

from . import nd

GATEWAY_HOST = 1  # a device's /64's ::1 is the router's gateway address in it
GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")  # what ISPs delegate (RFC 4291), documentation's 2001:db8:: too


class BadPrefix(ValueError):
    pass


def ula_prefix(global_id: int) -> ipaddress.IPv6Network:
    """RFC 4193: fd00::/8 with the locally assigned bit, a 40-bit global ID, a /48."""
    if not 0 <= global_id < 1 << 40:
        raise ValueError("a ULA global ID has 40 bits")
    return ipaddress.IPv6Network(((0xFD << 120) | (global_id << 80), 48))


def parse_delegated(text: str) -> ipaddress.IPv6Network | None:
    """A delegated prefix as the command line gives it ("" for none): a global /48../64."""
    if not text:
        return None
    try:
        net = ipaddress.IPv6Network(text)
    except ValueError as exc:
        raise BadPrefix(f"not an IPv6 prefix: {text!r} ({exc})") from None
    if not 48 <= net.prefixlen <= 64 or not net.subnet_of(GLOBAL_UNICAST):
        raise BadPrefix(f"{net}: a delegated prefix is a global unicast (2000::/3) /48 to /64")
    return net


@dataclass(frozen=True)
class Delegation:
    """What the prefix-delegation client last wrote: the prefix, and until when (the router's clock, seconds
    since the epoch) the ISP said it is preferred and valid; None when the file does not say."""

    prefix: ipaddress.IPv6Network
    until: tuple[float, float] | None = None  # (preferred, valid)


def parse_delegation(text: str, written_at: float) -> Delegation | None:
    """The prefix file's line: "PREFIX", or "PREFIX PREFERRED VALID" with the lifetimes (seconds) the ISP gave
    it, counted from written_at (when the client wrote the file); empty: no prefix."""
    fields = text.split()
    prefix = parse_delegated(fields[0]) if fields else None
    if prefix is None or len(fields) == 1:
        return Delegation(prefix) if prefix else None
    if len(fields) != 3 or not (fields[1].isdecimal() and fields[2].isdecimal()) or int(fields[1]) > int(fields[2]):
        raise BadPrefix(f"not PREFIX PREFERRED VALID (seconds, preferred <= valid): {text!r}")
    return Delegation(prefix, (written_at + int(fields[1]), written_at + int(fields[2])))


@dataclass(frozen=True)
class PrefixPlan:
    ula: ipaddress.IPv6Network  # /48
    delegated: ipaddress.IPv6Network | None = None
    # Until when (preferred, valid; the router's clock) the ISP keeps the delegated prefix; None: not known.
    delegated_until: tuple[float, float] | None = None

    @functools.cached_property
    def lan(self) -> tuple[str, ...]:
        """The household's own prefixes, which every device's /64s are in: the ULA /48, the delegated one."""
        return tuple(str(net) for net in (self.ula, self.delegated) if net is not None)

    def ula_of(self, subnet_index: int) -> str:
        """The device's ULA /64, numbered as its /30 (indexes fit: 16,384 /30s, 65,536 /64s)."""
        return str(_nth_64(self.ula, subnet_index))

    @property
    def global_slots(self) -> int:
        """How many /64s of the delegated prefix devices may have (its first is the router's own)."""
        if self.delegated is None:
            return 0
        return (1 << (64 - self.delegated.prefixlen)) - 1

    def global_of(self, slot: int) -> str:
        assert self.delegated is not None and 1 <= slot <= self.global_slots
        return str(_nth_64(self.delegated, slot))

    def lifetimes_of(self, prefix: str, now: float) -> tuple[int, int]:
        """(valid, preferred) seconds a /64 of the plan is advertised with: the router's own, but a delegated
        /64's never more than the ISP's delegation has left (RFC 9096, updating RFC 7084: a LAN prefix must
        not outlive the WAN's), so a device stops using an address the ISP will no longer route."""
        valid, preferred = nd.PREFIX_VALID_S, nd.PREFIX_PREFERRED_S
        delegated, until = self.delegated, self.delegated_until
        if delegated is None or until is None or not ipaddress.IPv6Network(prefix).subnet_of(delegated):
            return valid, preferred
        preferred_until, valid_until = until
        return min(valid, max(0, int(valid_until - now))), min(preferred, max(0, int(preferred_until - now)))


def _nth_64(net: ipaddress.IPv6Network, n: int) -> ipaddress.IPv6Network:
    return ipaddress.IPv6Network((int(net.network_address) + (n << 64), 64))


def gateway_of(prefix: str) -> str:
    """The router's address in a device's /64."""
    return str(ipaddress.IPv6Network(prefix).network_address + GATEWAY_HOST)


def resolver_of(prefixes: tuple[str, ...]) -> str | None:
    """The DNS server a device's adverts name (RDNSS): the router's address in its ULA /64 (the last of its
    /64s), which the router's resolver answers on. The ULA one, not the global: it stays the same when the
    ISP renumbers, and every forwarding device has one; not fe80::1, which a stub resolver must pair with
    an interface (several do not)."""
    return gateway_of(prefixes[-1]) if prefixes else None
