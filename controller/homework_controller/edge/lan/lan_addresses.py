"""The router's addresses on the LAN interface: each device's gateway (its /30's first address) and,
with IPv6, the router's address in each of a device's /64s (its ::1) and its link-local; a renumbering's
old ::1s are removed once devices were told they are gone; the routes devices offer (a Thread border
router's mesh) are routed on the LAN interface while they hold; and the stack forgets the MAC it had for a
device's addresses when they get another one (`ForgetNeighbours`). Netlink through pyroute2 takes milliseconds a
change, so the changes are made by one thread, in the order decided, off the packet path.
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import socket

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from ...effects import (
    AddGatewayAddress,
    AddIpv6Gateway,
    AddIpv6Route,
    ForgetNeighbours,
    LanAddressChange,
    RemoveIpv6Gateway,
    RemoveIpv6Route,
)
from ...wire.lan import Subnet
from ...wire.nd import ROUTER_LINK_LOCAL
from ...wire.prefixes import gateway_of

LOG = logging.getLogger("homework.controller")
IFA_F_NODAD = 0x02  # linux/if_addr.h
ENOENT, ESRCH, EEXIST, ENODEV, EADDRNOTAVAIL = 2, 3, 17, 19, 99
# The devices' offered routes are marked as learnt from router adverts (linux/rtnetlink.h's RTPROT_RA):
# the router's own stack learns none on the LAN interface (it forwards, and devices' adverts never reach
# it), so a controller starting again removes the ones an earlier run left, which it no longer knows.
ROUTE_PROTO = 9


Ipv6Change = AddIpv6Gateway | RemoveIpv6Gateway | AddIpv6Route | RemoveIpv6Route | ForgetNeighbours
Job = Subnet | Ipv6Change


class LanAddresses:
    def __init__(self, lan_iface: str, ipv6: bool):
        self.lan_iface, self.ipv6 = lan_iface, ipv6
        self.jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self.ipr = IPRoute()
        self.lan_index: int | None = None

    def change(self, effect: LanAddressChange) -> None:
        """Queued for the thread (`run_forever`)."""
        self.jobs.put(effect.subnet if isinstance(effect, AddGatewayAddress) else effect)

    def run_forever(self) -> None:
        if self.ipv6:
            self._add_ipv6_address(ROUTER_LINK_LOCAL)  # the source of its adverts, devices' default router
            self._remove_earlier_routes()
        while True:
            job = self.jobs.get()
            if isinstance(job, AddIpv6Gateway):
                self._add_ipv6_address(gateway_of(job.prefix))
            elif isinstance(job, RemoveIpv6Gateway):
                self._remove_ipv6_address(gateway_of(job.prefix))
            elif isinstance(job, (AddIpv6Route, RemoveIpv6Route)):
                self._route(job)
            elif isinstance(job, ForgetNeighbours):
                self._forget_neighbours(job)
            else:
                self._add_gateway_address(job)

    def _add_ipv6_address(self, address: str) -> None:
        """The router's address in a device's /64 (its ::1), or its link-local, on the LAN interface: the
        kernel then routes the /64 there. No duplicate-address detection: the /64 is the router's to give."""
        try:
            found = self.ipr.link_lookup(ifname=self.lan_iface)
            if not found:
                LOG.error("no interface %s to hold %s", self.lan_iface, address)
                return
            self.ipr.addr("add", index=found[0], address=address, prefixlen=64, flags=IFA_F_NODAD)
        except NetlinkError as exc:
            if exc.code != EEXIST:  # already there from an earlier run
                LOG.error("could not add %s/64 to %s: %s", address, self.lan_iface, exc)

    def _remove_ipv6_address(self, address: str) -> None:
        try:
            found = self.ipr.link_lookup(ifname=self.lan_iface)
            if found:
                self.ipr.addr("del", index=found[0], address=address, prefixlen=64)
        except NetlinkError as exc:
            if exc.code != EADDRNOTAVAIL:  # not there (a restart since it was added)
                LOG.error("could not remove %s/64 from %s: %s", address, self.lan_iface, exc)

    def _route(self, job: AddIpv6Route | RemoveIpv6Route) -> None:
        """A device's offered route on the LAN interface, on-link: the stack's neighbour solicitations for
        an address behind it are answered with that device's MAC (`Ipv6Addresses`' proxy), as for its /64."""
        adding = isinstance(job, AddIpv6Route)
        try:
            found = self.ipr.link_lookup(ifname=self.lan_iface)
            if found:
                verb = "replace" if adding else "del"
                self.ipr.route(verb, dst=job.prefix, oif=found[0], family=socket.AF_INET6, proto=ROUTE_PROTO)
        except NetlinkError as exc:
            if adding or exc.code not in (ENOENT, ESRCH):  # gone already (a restart since it was added)
                verb = "add" if adding else "remove"
                LOG.error("could not %s the route to %s on %s: %s", verb, job.prefix, self.lan_iface, exc)

    def _remove_earlier_routes(self) -> None:
        try:
            found = self.ipr.link_lookup(ifname=self.lan_iface)
            if not found:
                return
            for route in self.ipr.get_routes(family=socket.AF_INET6, oif=found[0], proto=ROUTE_PROTO):
                dst = f"{route.get_attr('RTA_DST')}/{route['dst_len']}"
                LOG.info("removing the route to %s an earlier run left on %s", dst, self.lan_iface)
                self.ipr.route("del", dst=dst, oif=found[0], family=socket.AF_INET6, proto=ROUTE_PROTO)
        except NetlinkError as exc:
            LOG.error("could not remove earlier routes from %s: %s", self.lan_iface, exc)

    def _forget_neighbours(self, job: ForgetNeighbours) -> None:
        """The kernel's neighbour entries for the device's address and for addresses in its /64s go, those
        that still hold its MAC."""
        try:
            found = self.ipr.link_lookup(ifname=self.lan_iface)
            if not found:
                return
            entries = self._neighbour(job.address, found[0])
            if job.prefixes:
                networks = [ipaddress.IPv6Network(p) for p in job.prefixes]
                for entry in self.ipr.get_neighbours(family=socket.AF_INET6, ifindex=found[0]):
                    address = entry.get_attr("NDA_DST")
                    if address and any(ipaddress.IPv6Address(address) in n for n in networks):
                        entries.append(entry)
            gone = {e.get_attr("NDA_DST") for e in entries if e.get_attr("NDA_LLADDR") == job.mac}
            for address in sorted(gone):
                try:
                    self.ipr.neigh("del", dst=address, ifindex=found[0])
                except NetlinkError as exc:
                    if exc.code != ENOENT:  # gone meanwhile
                        LOG.error("could not forget the neighbour %s on %s: %s", address, self.lan_iface, exc)
        except NetlinkError as exc:
            LOG.error("could not read the neighbours on %s: %s", self.lan_iface, exc)

    def _neighbour(self, address: str, index: int) -> list:
        """The stack's entry for one address, if it has one (it never asked for an address nobody used)."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            return list(self.ipr.neigh("get", dst=address, ifindex=index, family=family))
        except NetlinkError as exc:
            if exc.code == ENOENT:
                return []
            raise

    def _add_gateway_address(self, subnet: Subnet) -> None:
        try:
            if self.lan_index is None:
                found = self.ipr.link_lookup(ifname=self.lan_iface)
                if not found:
                    LOG.error("no interface %s to hold gateway %s", self.lan_iface, subnet.gateway)
                    return
                self.lan_index = found[0]
            self.ipr.addr(
                "add",
                index=self.lan_index,
                address=subnet.gateway,
                prefixlen=subnet.prefixlen,
                broadcast=subnet.broadcast,
            )
        except NetlinkError as exc:
            if exc.code == ENODEV:  # the interface was recreated; look it up again next time
                self.lan_index = None
            if exc.code != EEXIST:  # already there from an earlier run
                LOG.error("could not add gateway %s/30 to %s: %s", subnet.gateway, self.lan_iface, exc)
