"""fvctl's JSON-RPC endpoint and the Prometheus metrics, both on loopback HTTP.

Mutations go through the registry (a transaction) and are applied to this slicer before the call
returns, so what fvctl reports done is already in force here; other slicers follow the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from . import fastpath
from .model import Household, InvalidHousehold
from .registry import RegistryError
from .relay import Slicer

LOG = logging.getLogger("isp_flowvisor.admin")
Handler = Callable[[str, str, dict[str, str], bytes], Awaitable[tuple[int, str, bytes]]]
# Where the slicer keeps fvctl's token unless told otherwise; fvctl reads it from the same place.
DEFAULT_TOKEN_FILE = Path("/var/lib/isp-flowvisor/fvctl.token")
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    415: "Unsupported Media Type",
}


class TokenError(ValueError):
    pass


def load_or_create_token(path: Path) -> str:
    """fvctl's token: read from `path`, or made there (mode 0600) at the first start.

    A token file others may read is refused: anyone who reads it can manage every household."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            raise TokenError(f"{path}: readable by others; chmod 600 it") from None
        token = path.read_text().strip()
        if len(token) < 16:
            raise TokenError(f"{path}: a token of at least 16 characters, please") from None
        return token
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return load_or_create_token(path)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    LOG.info("made fvctl's token in %s", path)
    return token


def _loopback_host(host: str) -> bool:
    """Is the Host header a loopback name? A page that rebinds its own name to 127.0.0.1 still
    sends its own name here."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return name.lower() in _LOOPBACK_HOSTS


async def serve_http(host: str, port: int, handler: Handler) -> asyncio.Server:
    """A deliberately small HTTP/1.1 server: one request per connection, bodies up to 1 MiB."""

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            length = int(headers.get("content-length", "0"))
            if length > 1 << 20:
                raise ValueError("body too large")
            body = await asyncio.wait_for(reader.readexactly(length), 10) if length else b""
            status, ctype, payload = await handler(method, path, headers, body)
        except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, ctype, payload = 400, "text/plain", b"bad request\n"
        reason = _REASONS.get(status, "Error")
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + payload
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    return await asyncio.start_server(on_connection, host, port)


class Admin:
    def __init__(self, slicer: Slicer, token: str, queue_stats: Callable[[], dict] | None = None):
        if not token:
            raise TokenError("fvctl's endpoint needs a token")
        self.slicer = slicer
        self.token = token
        self.queue_stats = queue_stats or dict
        self.usage: dict[str, dict[str, int]] = {}

    # --- JSON-RPC -----------------------------------------------------------------------------

    async def rpc(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        if method != "POST":
            return 404, "text/plain", b"POST JSON-RPC 2.0 here\n"
        # A web page in a browser on this host can reach loopback too: it cannot choose the Host
        # header, and without a CORS preflight (which this endpoint never answers) it can send
        # only form or text bodies, never application/json.
        if not _loopback_host(headers.get("host", "")):
            return 403, "text/plain", b"loopback Host only\n"
        if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return 415, "text/plain", b"Content-Type: application/json only\n"
        if not hmac.compare_digest(headers.get("authorization", "").encode(), f"Bearer {self.token}".encode()):
            return 401, "text/plain", b"token required\n"
        call_id = None
        try:
            request = json.loads(body)
            call_id = request.get("id")
            result = await self.call(str(request["method"]), request.get("params") or {})
            response: dict[str, Any] = {"jsonrpc": "2.0", "id": call_id, "result": result}
        except (InvalidHousehold, RegistryError, KeyError, TypeError, ValueError) as exc:
            response = {
                "jsonrpc": "2.0",
                "id": call_id,
                "error": {"code": -32000, "message": str(exc) or type(exc).__name__},
            }
        return 200, "application/json", json.dumps(response).encode()

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        registry = self.slicer.registry
        if method == "list":
            return [self._summary(h) for h in sorted((await registry.snapshot()).values(), key=lambda h: h.slot)]
        if method == "show":
            households = await registry.snapshot()
            return self._summary(households[params["name"]]) | {"record": households[params["name"]].to_dict()}
        if method == "add":
            added = await registry.add(Household.from_dict({**params, "slot": 0}))
            await self.slicer.apply_registry(await registry.snapshot())
            return added.to_dict()
        if method == "update":
            updated = await registry.update(params["name"], params.get("changes", {}))
            await self.slicer.apply_registry(await registry.snapshot())
            return updated.to_dict()
        if method == "remove":
            await registry.remove(params["name"])
            await self.slicer.apply_registry(await registry.snapshot())
            return {"removed": params["name"]}
        if method == "reload":
            await self.slicer.apply_registry(await registry.snapshot())
            return {"households": len(self.slicer.sessions)}
        if method == "stats":
            households = await registry.snapshot()
            names = [params["name"]] if params.get("name") else sorted(households)
            return {name: self._summary(households[name]) for name in names}
        raise ValueError(f"unknown method {method!r}")

    def _summary(self, household: Household) -> dict[str, Any]:
        session = self.slicer.sessions.get(household.name)
        counters = session.counters if session is not None else None
        book = session.book if session is not None else None
        return {
            "name": household.name,
            "slot": household.slot,
            "addresses": [str(a) for a in household.addresses],
            "guaranteed_mbit": household.guaranteed_mbit,
            "connected": self.slicer.is_connected(household.name),
            "rules": len(book) if book else 0,
            "flow_quota": household.flow_quota,
            "counters": vars(counters) if counters else {},
            "usage_bytes": self.usage.get(household.name, {}),
            "queues": self.queue_stats().get(household.name, {}),
        }

    # --- metrics ------------------------------------------------------------------------------

    async def metrics(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        if path.split("?")[0] != "/metrics":
            return 404, "text/plain", b"see /metrics\n"
        return 200, "text/plain; version=0.0.4", self.exposition().encode()

    def exposition(self) -> str:
        slicer = self.slicer
        out: list[str] = []

        def family(name: str, kind: str, text: str, samples: list[tuple[str, Any]]) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{labels} {value}" for labels, value in samples)

        households = sorted(slicer.households.values(), key=lambda h: h.slot)

        def per_household(getter: Callable[[Household], float]) -> list[tuple[str, float]]:
            return [(f'{{household="{h.name}"}}', getter(h)) for h in households]

        def counter(field: str) -> Callable[[Household], float]:
            return lambda h: getattr(slicer.sessions[h.name].counters, field)

        family(
            "isp_flowvisor_switch_connected",
            "gauge",
            "1 while the aggregation switch is connected",
            [("", 1 if slicer.switch_ready.is_set() else 0)],
        )
        family(
            "isp_flowvisor_switch_connects_total",
            "counter",
            "switch connections accepted",
            [("", slicer.switch_connects)],
        )
        family(
            "isp_flowvisor_household_connected",
            "gauge",
            "1 while the household's controller is connected",
            per_household(lambda h: 1 if slicer.is_connected(h.name) else 0),
        )
        family(
            "isp_flowvisor_household_rules",
            "gauge",
            "flow entries the household has on the switch",
            per_household(lambda h: len(slicer.sessions[h.name].book)),
        )
        family(
            "isp_flowvisor_household_rule_quota",
            "gauge",
            "the household's flow-table quota",
            per_household(lambda h: h.flow_quota),
        )
        for field, text in (
            ("messages_in", "control messages served"),
            ("relayed", "messages relayed to the switch"),
            ("refused", "messages refused with an OpenFlow error (outside the slice, over quota)"),
            ("malformed", "undecodable or unknown messages answered with an error"),
            ("throttled", "scheduler rounds the household waited on its message-rate limit"),
            ("packet_ins", "packet-ins delivered to the household"),
            ("flow_mods", "flow-mods served (checked by the fast path or by os-ken's path)"),
            ("fast_path", "flow-mods checked and translated by the fast path, without os-ken's decoding"),
        ):
            family(f"isp_flowvisor_household_{field}_total", "counter", text, per_household(counter(field)))
        family(
            "isp_flowvisor_fast_path_cache_lookups_total",
            "counter",
            "the fast path's lookups of a flow-mod's parts it made before (a miss works the part out)",
            [
                (f'{{part="{part}",result="{result}"}}', count)
                for part, lookups in fastpath.cache_lookups().items()
                for result, count in lookups.items()
            ],
        )
        usage = [
            (f'{{household="{name}",direction="{d}"}}', v)
            for name, dirs in sorted(self.usage.items())
            for d, v in sorted(dirs.items())
        ]
        family(
            "isp_flowvisor_household_bytes_total", "counter", "bytes through the switch to/from the household", usage
        )
        queues = self.queue_stats()
        for field, text in (
            ("drops", "packets dropped in the household's downlink queue"),
            ("bytes", "bytes sent from the household's downlink queue"),
        ):
            family(
                f"isp_flowvisor_household_queue_{field}_total",
                "counter",
                text,
                [
                    (f'{{household="{name}",queue="{q}"}}', stats[field])
                    for name, per_q in sorted(queues.items())
                    for q, stats in sorted(per_q.items())
                ],
            )
        return "\n".join(out) + "\n"
