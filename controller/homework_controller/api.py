"""ws.v1: the controller's JSON control API (loopback only).

A plain WSGI application: it parses the request, calls the router service and
renders JSON. State-changing methods are POST; errors are JSON with a 4xx code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from urllib.parse import parse_qs

from .model import BadMac
from .router import ApiError

LOG = logging.getLogger(__name__)

PREFIX = "/ws.v1/"

# method name -> (HTTP verb, number of path arguments, name of the service call)
ROUTES = {
    "status": ("GET", (0, 1), "status"),
    "dhcp-status": ("GET", (0,), "dhcp_status"),
    "blacklist-status": ("GET", (0,), "blacklist_status"),
    "counters": ("GET", (0,), "counters"),
    "health": ("GET", (0,), "health"),
    "permit": ("POST", (1,), "permit"),
    "deny": ("POST", (1,), "deny"),
    "whitelist": ("POST", (1,), "whitelist"),
    "blacklist": ("POST", (1,), "blacklist"),
    "name": ("POST", (1,), "rename"),  # the name itself in the query string: ?name=Grandma%27s%20iPad
    "permit-dns": ("POST", (2,), "permit_dns"),
    "deny-dns": ("POST", (2,), "deny_dns"),
    "dns-rules": ("GET", (1,), "dns_rules_of"),
    "apps": ("GET", (0,), "app_priorities"),
    "wifi-key": ("POST", (1,), "issue_wifi_key"),  # a new passphrase of the device's own, with its QR payload
    "show-wifi-key": ("GET", (1,), "wifi_key_of"),
    "revoke-wifi-key": ("POST", (1,), "revoke_wifi_key"),
}


def make_app(call: Callable[..., object]):
    """`call(name, *args)` runs a service method and returns its JSON-able result."""

    def app(environ, start_response):
        status, body = _dispatch(
            call,
            environ.get("REQUEST_METHOD", "GET"),
            environ.get("PATH_INFO", ""),
            parse_qs(environ.get("QUERY_STRING", "")),
        )
        data = json.dumps(body).encode()
        start_response(
            f"{status} {_REASONS.get(status, '')}".strip(),
            [("Content-Type", "application/json"), ("Content-Length", str(len(data))), ("Cache-Control", "no-store")],
        )
        return [data]

    return app


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def _dispatch(call, verb: str, path: str, query: dict) -> tuple[int, object]:
    if not path.startswith(PREFIX):
        return 404, {"error": f"unknown path {path!r}; the API lives under {PREFIX}"}
    parts = [p for p in path[len(PREFIX) :].split("/") if p]
    if not parts or parts[0] not in ROUTES:
        return 404, {"error": f"unknown method {parts[0] if parts else ''!r}", "methods": sorted(ROUTES)}
    method, args = parts[0], parts[1:]
    want_verb, arities, service_name = ROUTES[method]
    if verb != want_verb:
        return 405, {"error": f"{method} needs {want_verb}, not {verb}"}
    if len(args) not in arities:
        return 400, {"error": f"{method} takes {' or '.join(map(str, arities))} path argument(s), got {len(args)}"}
    if method == "name":
        if "name" not in query:
            return 400, {"error": "name needs ?name=... (empty to clear)"}
        args = [*args, query["name"][0]]
    try:
        return 200, call(service_name, *args)
    except BadMac as exc:
        return 400, {"error": str(exc)}
    except ApiError as exc:
        return exc.status, {"error": str(exc)}
    except Exception:  # the API must answer, whatever broke behind it
        LOG.exception("ws.v1 %s failed", method)
        return 500, {"error": f"internal error in {method}; see the controller log"}
