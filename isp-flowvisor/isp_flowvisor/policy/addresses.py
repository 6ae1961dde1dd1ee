"""The address fields of the flowspace (IPv4, ARP, IPv6) and the prefix a field's value selects."""

from __future__ import annotations

import functools
import ipaddress
from typing import Any

from .layout import ETH_ARP, ETH_IPV4, ETH_IPV6

_IPV4_FIELDS = {"ipv4_src": ETH_IPV4, "ipv4_dst": ETH_IPV4, "arp_spa": ETH_ARP, "arp_tpa": ETH_ARP}
_ADDRESS_FIELDS = {**_IPV4_FIELDS, "ipv6_src": ETH_IPV6, "ipv6_dst": ETH_IPV6}
_DESTINATION_FIELDS = ("ipv4_dst", "arp_tpa", "ipv6_dst")


# Address checks and rule keys convert the same few values over and over (a household's own
# addresses in every rule): each conversion is kept by value.
_VALUE_CACHE = 1 << 14


@functools.lru_cache(maxsize=_VALUE_CACHE)
def _network(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The prefix an address field (IPv4 or IPv6; address, or address and mask) selects as the
    switch reads it (value & mask, bit by bit), or None when its mask is not a prefix. `ipaddress`
    would take a mask such as 0.0.0.255 (or ::ffff:ffff:ffff:ffff) for a host mask (a /24, a /64),
    while the switch compares the last bits only."""
    if not isinstance(value, tuple):
        return ipaddress.ip_network(str(value))
    mask = ipaddress.ip_address(value[1])
    all_ones = (1 << mask.max_prefixlen) - 1
    inverted = int(mask) ^ all_ones
    if inverted & (inverted + 1):
        return None
    return ipaddress.ip_network(f"{value[0]}/{mask.max_prefixlen - inverted.bit_length()}", strict=False)
