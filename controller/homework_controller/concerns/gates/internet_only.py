"""Internet only, a plugged-in gate: the household lets a device reach the internet and never another device
(a visitor's laptop, a smart plug). Its packets to other devices' addresses (the LAN's IPv4 /16, the
household's IPv6 ULA /48 and delegated prefix) are dropped, and its broadcast and multicast reach the router
alone; the internet, the router's resolver and the router itself (its gateway addresses in the device's /30
and /64s, and its LAN address, where the web UI is) stay in reach. It holds no traffic back: the device
stays online, so it never appears paused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ... import flows
from ...flows.flows_v6 import ETH_IPV6
from ...flows.values import cookie_of
from ...lifecycle import move_key
from ...store import DeviceStore
from ...wire.lan import LAN_NETWORK, ROUTER_ADDRESS
from ...wire.prefixes import gateway_of
from .gate import GateOperation

NAME = "internet-only"
ON = "on"  # its value in the store's gate_state

# In the routing table, above the routes to devices (their hairpins) and broadcast's copies to them; the
# router's own addresses above that.
TO_THE_LAN = flows.RoutingPriority.TO_DEVICE + 50
TO_THE_ROUTER = TO_THE_LAN + 10
LAN_V4 = (str(LAN_NETWORK.network_address), str(LAN_NETWORK.netmask))
MULTICAST_V6 = flows.masked("ff00::/8")


@dataclass(frozen=True)
class InternetOnlyRules:
    """The gate's rules for a device (`flows.GateRules`): the same for every device, read off its rules."""

    def rules(self, of: flows.DeviceRules) -> Iterable[flows.FlowRule]:
        assert of.subnet is not None
        routers = (of.subnet.gateway, ROUTER_ADDRESS)
        return self._gated(of, flows.ETH_IPV4, "ipv4_dst", routers, (LAN_V4,), (flows.ALL_HOSTS, flows.MULTICAST))

    def rules_v6(
        self, of: flows.DeviceRules, prefixes: tuple[str, ...], lan: tuple[str, ...]
    ) -> Iterable[flows.FlowRule]:
        routers = tuple(gateway_of(prefix) for prefix in prefixes)
        return self._gated(of, ETH_IPV6, "ipv6_dst", routers, tuple(map(flows.masked, lan)), (MULTICAST_V6,))

    @staticmethod
    def _gated(of: flows.DeviceRules, eth_type: int, dst: str, routers, lan, to_all) -> set[flows.FlowRule]:
        """From the device on its own ports: to the router's addresses, on to it; to the LAN, dropped; to
        everyone (broadcast, multicast), to the router alone."""
        cookie = cookie_of(of.mac)
        out: set[flows.FlowRule] = set()
        for port in of.own_ports:
            sent: dict = {"in_port": port, "eth_src": of.mac, "eth_type": eth_type}
            out |= {
                flows.rule(flows.TABLE_ROUTING, TO_THE_ROUTER, (flows.Output(flows.LOCAL),), cookie, **sent, **{dst: a})
                for a in routers
            }
            out |= {flows.rule(flows.TABLE_ROUTING, TO_THE_LAN, (), cookie, **sent, **{dst: net}) for net in lan}
            out |= {
                flows.rule(flows.TABLE_ROUTING, TO_THE_LAN, (flows.Output(flows.LOCAL),), cookie, **sent, **{dst: a})
                for a in to_all
            }
        return out


RULES = InternetOnlyRules()


class InternetOnly:
    name = NAME

    def __init__(self, store: DeviceStore, clock: Callable[[], float]) -> None:
        self.store = store
        self.restricted = {mac for mac, value in store.load_gate_state(NAME).items() if value == ON}

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self.restricted

    def forget(self, mac: str) -> None:
        self.restricted.discard(mac)

    def move(self, old_mac: str, new_mac: str) -> None:
        move_key(old_mac, new_mac, self.restricted)

    # -- its word on the device

    def may_forward(self, mac: str) -> bool:
        return True

    def hold_of(self, mac: str) -> tuple[str, float | None] | None:
        return None

    def status_of(self, mac: str) -> dict:
        return {"internet_only": mac in self.restricted}

    def tick(self, now: float) -> set[str]:
        return set()

    def rules_of(self, mac: str) -> flows.GateRules | None:
        return RULES if mac in self.restricted else None

    # -- the household's decisions

    def internet_only(self, mac: str) -> None:
        self.restricted.add(mac)
        self.store.save_gate_state(mac, NAME, ON)

    def lan_access(self, mac: str) -> None:
        self.restricted.discard(mac)
        self.store.save_gate_state(mac, NAME, None)

    operations: tuple[GateOperation, ...] = (
        GateOperation(
            "internet-only",
            "the device reaches the internet, the router and its resolver only, never another device",
            "make a device internet only",
            ("owner",),
            internet_only,
        ),
        GateOperation(
            "lan-access",
            "the device reaches the household's other devices again (lifts internet only)",
            "give a device back its reach to other devices",
            ("owner",),
            lan_access,
        ),
    )
