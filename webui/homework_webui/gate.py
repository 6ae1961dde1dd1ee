"""What every request passes before a view: the router's own names (no DNS rebinding), a
permitted device, the view's declared access rule (deny by default), the same origin and the
CSRF token for a change; the security headers on every answer; a device held back answered
before Flask does any work; and the body limit the server applies before it reads a body."""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable

from flask import Flask, g, request, session
from itsdangerous import BadSignature
from werkzeug.http import parse_cookie

from . import captive
from .errors import error, plain
from .security import PUBLIC, HeldBack, host_name, is_loopback, same_origin
from .services import Services
from .updates import CHUNK_BYTES

SATELLITE_PAIR_PATH = "/api/satellite/pair"  # routes/satellites.PAIR_PATH

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# What the router is called on its own: a page reached under any other name (DNS rebinding)
# is refused. The router's LAN addresses and names are added by the caller.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# The largest body of any request but an owner's update piece (JSON: names, passwords, codes).
SMALL_BODY_BYTES = 16 * 1024
UPLOAD_PATH = "/api/update/bundle"
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
}


def install(app: Flask, svc: Services, hostnames: Iterable[str]) -> None:
    """`hostnames`: the names and addresses the router answers to besides loopback."""
    accounts, hub = svc.accounts, svc.hub
    own_names = {host_name(h) for h in (*LOOPBACK_NAMES, *hostnames)} - {None}

    @app.before_request
    def gatekeeper():
        addr = request.remote_addr or ""
        g.client_ip = addr
        # A page under someone else's name that resolves to us (DNS rebinding) gets nothing, but for an
        # OS's captive-portal probe from a held-back device, which is sent on to the portal.
        if host_name(request.headers.get("Host")) not in own_names:
            probe = None if is_loopback(addr) or request.method not in SAFE_METHODS else captive.probe_answer()
            return probe or plain(400, "This router answers only to its own names and addresses.")
        if not is_loopback(addr):
            state = hub.device_state_for_ip(addr)
            if state is None:
                return plain(503, "The router cannot check this device right now. Try again in a moment.")
            # A device held back reaches the captive portal (which tells it why), and nothing else: but for a
            # satellite access point's pairing, which lets it in with the owner's code (routes/satellites.py).
            if state != "permitted" and request.path not in captive.PATHS and request.path != SATELLITE_PAIR_PATH:
                return plain(403, "This device has not been let into the home network, so it cannot manage it.")
        view = app.view_functions.get(request.endpoint) if request.endpoint else None
        if view is None:
            return None  # 404/405 follow
        rule = getattr(view, "access", None)
        if rule is None:
            return error(403, "this endpoint declares no access rule")
        g.user = accounts.session(session.get("sid"))
        if request.method not in SAFE_METHODS:
            origin = request.headers.get("Origin")
            if origin is not None and not same_origin(origin, request.scheme, request.host):
                return error(403, "this request comes from another site's page", code="origin")
            expected = g.user["csrf"] if g.user else session.get("csrf")
            # As bytes: a header may carry any octet, which hmac cannot compare as text.
            sent = request.headers.get("X-CSRF-Token", "").encode("utf-8", "surrogateescape")
            if not expected or not hmac.compare_digest(sent, expected.encode()):
                return error(403, "missing or wrong CSRF token; reload the page", code="csrf")
        if rule == PUBLIC:
            return None
        if g.user is None:
            return error(401, "please sign in", code="signin")
        if g.user["role"] not in rule:
            return error(403, f"a {g.user['role']} account may not do this", code="role")
        return None

    @app.after_request
    def headers(resp):
        resp.headers.setdefault("Cache-Control", "no-store")
        resp.headers.update(SECURITY_HEADERS)
        return resp

    # A device already held back is answered before Flask does any work (cookie, database,
    # routing), so a flood of guesses costs the router as little as it can; behind waitress
    # such requests also wait in a lane of their own (serving.HeldBackLane).
    svc.held_back = HeldBack(
        {
            "/api/login": svc.sign_ins.devices,
            "/api/me/password": svc.sign_ins.devices,
            "/api/setup": svc.setup_guesses,
            "/api/pair": svc.pairing_guesses,
            SATELLITE_PAIR_PATH: svc.pairing_guesses,
        }
    )
    svc.body_limit = _body_limit(app, svc)
    app.wsgi_app = _refuse_held_back(app.wsgi_app, svc.held_back)  # type: ignore[method-assign]


def _body_limit(app: Flask, svc: Services):
    cookie_reader = app.session_interface.get_signing_serializer(app)  # type: ignore[attr-defined]

    def body_limit(method: str, path: str, cookie_header: str) -> int:
        """The largest body a request may have, decided on its headers (serving.BodyLimitParser),
        before the server reads any of it: an update piece from a signed-in owner when an update
        spool is configured, a small JSON body otherwise."""
        if svc.update_spool is None or method != "PUT" or path != UPLOAD_PATH:
            return SMALL_BODY_BYTES
        try:
            signed = parse_cookie(cookie_header).get(app.config["SESSION_COOKIE_NAME"]) or ""
            sid = cookie_reader.loads(signed, max_age=int(app.permanent_session_lifetime.total_seconds())).get("sid")
        except (BadSignature, AttributeError):
            return SMALL_BODY_BYTES
        user = svc.accounts.session(sid)
        return CHUNK_BYTES if user is not None and user["role"] == "owner" else SMALL_BODY_BYTES

    return body_limit


def _refuse_held_back(wsgi_app, held_back: HeldBack):
    def held_back_first(environ, start_response):
        wait = held_back.wait(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("REMOTE_ADDR", ""))
        if not wait:
            return wsgi_app(environ, start_response)
        body = json.dumps({"error": f"too many attempts; try again in {wait} s", "retry_after": wait}).encode()
        start_response(
            "429 Too Many Requests",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Retry-After", str(wait)),
                ("Cache-Control", "no-store"),
                ("X-Content-Type-Options", "nosniff"),
            ],
        )
        return [body]

    return held_back_first
