"""Which application a flow belongs to, when no end-host agent has said: inferred from ports.

An agent's report (hwdb AppTuples) is the better source and will take precedence; this is
what the router can tell on its own. The names are the ones the phone page shows.
"""
from __future__ import annotations

from .flows import PROTO_TCP, PROTO_UDP, FiveTuple

_TCP = {80: "web", 443: "web", 8080: "web", 22: "ssh", 25: "email", 465: "email", 587: "email",
        993: "email", 143: "email", 995: "email", 110: "email", 1935: "streaming", 554: "streaming",
        3074: "games", 5222: "messaging", 5223: "messaging", 853: "dns"}
_UDP = {53: "dns", 443: "web", 123: "time", 3478: "video-call", 3479: "video-call", 3480: "video-call",
        3481: "video-call", 5060: "video-call", 5061: "video-call", 3074: "games", 5353: "local"}
_UDP_RANGES = [(19302, 19309, "video-call"), (27000, 27050, "games"), (16384, 16482, "video-call")]


def _by_port(proto: int, port: int) -> str | None:
    if proto == PROTO_TCP:
        return _TCP.get(port)
    if proto == PROTO_UDP:
        return _UDP.get(port) or next((app for lo, hi, app in _UDP_RANGES if lo <= port <= hi), None)
    return None


def infer(flow: FiveTuple) -> str:
    """The service port decides, whichever end it is on (replies come from it)."""
    return _by_port(flow.proto, flow.dport) or _by_port(flow.proto, flow.sport) or "other"
