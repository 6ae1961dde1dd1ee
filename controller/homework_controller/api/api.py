"""ws.v1: the controller's JSON control API (loopback only).

A plain WSGI application: it parses the request, calls the router service and
renders JSON. State-changing methods are POST; errors are JSON with a 4xx code.

Listening on loopback is not enough: a browser may run on the router itself, and ws.v1 answers
Wi-Fi passphrases. A page under a name of its own that resolves to 127.0.0.1 (DNS rebinding) sends
that name as Host, so only loopback's own names are answered (400 otherwise); a page elsewhere can
still make the browser send a POST to 127.0.0.1 (no CORS is needed to send it), and the browser
says whose page it was in Origin, so a state change from any origin but ws.v1's own is refused
(403). The web UI's client sends a loopback Host and no Origin.

Each request acts for a role (`authority.HEADER`, X-Homework-Role: owner | member | panel | device | isp;
without it, the owner: the router's administrator on loopback), which the controller checks against
`authority.TABLE` where it performs the operation: the web UI says for whom it asks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from urllib.parse import parse_qs

from ..errors import ApiError
from ..model import BadMac
from . import authority, operations
from .operations import PREFIX

LOG = logging.getLogger(__name__)

ROUTES = operations.BY_NAME  # every method, declared once (operations.py)


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
BODY_LIMIT = 4096  # a JSON body (the radio's settings are a few hundred bytes)


def make_app(call: Callable[..., object]):
    """`call(name, *args, role=...)` runs a service method for a role (`authority`) and returns its JSON-able
    result."""

    def app(environ, start_response):
        verb = environ.get("REQUEST_METHOD", "GET")
        status, body = _refused(environ, verb) or _dispatch(
            call,
            verb,
            environ.get("PATH_INFO", ""),
            parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True),
            environ,
        )
        data = json.dumps(body).encode()
        start_response(
            f"{status} {_REASONS.get(status, '')}".strip(),
            [("Content-Type", "application/json"), ("Content-Length", str(len(data))), ("Cache-Control", "no-store")],
        )
        return [data]

    return app


def _refused(environ: dict, verb: str) -> tuple[int, object] | None:
    """A request not from loopback's own names (400), or a state change from another site's page (403)."""
    port = environ.get("SERVER_PORT", "")
    if environ.get("HTTP_HOST", "").lower() not in {f"{name}:{port}" for name in LOOPBACK_NAMES}:
        return 400, {"error": f"ws.v1 answers only to loopback ({', '.join(LOOPBACK_NAMES)} at port {port})"}
    origin = environ.get("HTTP_ORIGIN")
    if verb != "GET" and origin is not None and origin.lower() not in {f"http://{n}:{port}" for n in LOOPBACK_NAMES}:
        return 403, {"error": "this request comes from another site's page"}
    return None


_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def _json_body(environ: dict) -> tuple[int, object]:
    """The request's JSON body: (200, the value) or (an error status, its answer)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 400, {"error": "Content-Length is not a number"}
    if length < 0:
        return 400, {"error": "Content-Length is negative"}
    if length > BODY_LIMIT:
        return 413, {"error": f"a body of at most {BODY_LIMIT} bytes"}
    try:
        return 200, json.loads(environ["wsgi.input"].read(length) if length else b"")
    except (ValueError, RecursionError):  # also not UTF-8; nested deeper than the parser goes
        return 400, {"error": "send a JSON object"}


def _dispatch(call, verb: str, path: str, query: dict, environ: dict) -> tuple[int, object]:
    if not path.startswith(PREFIX):
        return 404, {"error": f"unknown path {path!r}; the API lives under {PREFIX}"}
    parts = [p for p in path[len(PREFIX) :].split("/") if p]
    if not parts or parts[0] not in ROUTES:
        return 404, {"error": f"unknown method {parts[0] if parts else ''!r}", "methods": sorted(ROUTES)}
    method = parts[0]
    args: list[object] = list(parts[1:])  # the path's, then the query's and the body's
    op = ROUTES[method]
    if verb != op.verb:
        return 405, {"error": f"{method} needs {op.verb}, not {verb}"}
    if len(args) not in op.arities:
        return 400, {"error": f"{method} takes {' or '.join(map(str, op.arities))} path argument(s), got {len(args)}"}
    if op.query:
        if op.query not in query:
            return 400, {"error": f"{method} needs ?{op.query}=... (empty to clear)"}
        args = [*args, query[op.query][0]]
    if op.body:
        status, sent = _json_body(environ)
        if status != 200:
            return status, sent
        args = [*args, sent]
    try:
        role = authority.role_of(environ.get("HTTP_X_HOMEWORK_ROLE"))
        return 200, call(op.name, *args, role=role)
    except BadMac as exc:
        return 400, {"error": str(exc)}
    except ApiError as exc:
        return exc.status, {"error": str(exc), **exc.details}
    except Exception:  # the API must answer, whatever broke behind it
        LOG.exception("ws.v1 %s failed", method)
        return 500, {"error": f"internal error in {method}; see the controller log"}
