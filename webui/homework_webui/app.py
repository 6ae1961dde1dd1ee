"""The Flask application: JSON API, Server-Sent Events and the built single-page app."""

from __future__ import annotations

import hmac
import json
import os
import queue
import re
import secrets
import time
from collections.abc import Iterable
from datetime import timedelta

from flask import Flask, Response, abort, g, jsonify, request, send_from_directory, session
from itsdangerous import BadSignature
from werkzeug.http import parse_cookie

from .accounts import AccountError, AccountStore, AlreadyOwnedError, printable_name
from .controller import ControllerClient, ControllerDownError, ControllerError
from .hwdb import APP_RE, PRIORITIES, Hwdb, HwdbError, quote
from .latency import CheckRunning, LatencyCheck, TargetError
from .live import APP_ROLES, OVERLOAD_KIND, LiveHub, StreamLimits
from .security import (
    PUBLIC,
    SIGNED_IN,
    HeldBack,
    RateLimiter,
    SetupCode,
    SignInGuard,
    access,
    host_name,
    is_loopback,
    load_or_create_secret,
    same_origin,
)
from .updates import CHUNK_BYTES, UpdateError, UpdateSpool

MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
DOMAIN_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# What the router is called on its own: a page reached under any other name (DNS rebinding)
# is refused. The router's LAN addresses and names are added by the caller.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
APP_RANGES = {"hour": (3600, 60), "day": (86400, 96)}
KEEPALIVE_SECONDS = 15.0
LATENCY_UNCONFIGURED = (
    "The connection check is not configured on this router: it needs a test server "
    "(the web UI's --latency-target option)."
)
# A check loads the home's uplink for its duration: a member's page (or script) looping on it
# gets this many per account in ten minutes; one runs at a time router-wide.
LATENCY_RUNNING = "Someone in the home is already running a connection check; try again when it has finished."
LATENCY_CHECKS_PER_ACCOUNT = 3
LATENCY_HISTORY = 5
LATENCY_COLUMNS = ("grade", "idle_ms", "loaded_ms", "loaded_p90_ms", "added_ms", "down_kbit", "up_kbit", "loss_pct")
WIFI_KEYS_UNAVAILABLE = (
    "Own passphrases are not available on this router: it has no Wi-Fi network name "
    "configured (the controller's --wifi-ssid)."
)
UPDATES_UNCONFIGURED = (
    "Updates are installed from the router's console on this system "
    "(homework-update); the web UI has no installer to hand them to."
)
# The key end-host agents check the router by (hwdb writes it: 64 lowercase hex characters).
AGENT_KEY_LENGTH = 64
AGENT_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
AGENT_KEY_UNCONFIGURED = (
    "This router has no agent key configured (the web UI's --agent-key-file option), so end-host "
    "agents cannot check that they talk to it."
)
AGENT_KEY_MISSING = "The router has not made its agent key yet (hwdb makes it when it starts); try again in a moment."
WIFI_KEY_FIELDS = ("mac", "keyid", "ssid", "passphrase", "qr", "created")
# The largest body of any request but an owner's update piece (JSON: names, passwords, codes).
SMALL_BODY_BYTES = 16 * 1024
UPLOAD_PATH = "/api/update/bundle"
DEFAULT_DIST = os.path.join(os.path.dirname(__file__), "..", "frontend", "dist")


class ApiError(Exception):
    def __init__(self, status: int, message: str, **extra):
        super().__init__(message)
        self.status, self.extra = status, extra


def create_app(
    state_dir: str,
    controller_url: str = "http://127.0.0.1:8081",
    hwdb_addr: tuple = ("127.0.0.1", 987),
    dist_dir: str = DEFAULT_DIST,
    cookie_secure: bool = False,
    start_live: bool = True,
    hostnames: Iterable[str] = (),
    setup_code_file: str | None = None,
    stream_limits: StreamLimits = StreamLimits(),
    latency_check: LatencyCheck | None = None,
    update_spool: UpdateSpool | None = None,
    agent_key_file: str | None = None,
) -> Flask:
    """`hostnames`: the names and addresses the router answers to besides loopback (its
    listen addresses, names like router.home). `setup_code_file`: a setup code provisioned
    by the firmware image, if any (see security.SetupCode). `latency_check`: the
    "latency under load" check, when a test server is configured. `update_spool`: where
    uploaded firmware updates go to the router's installer (updates.py), on the image.
    `agent_key_file`: the household's agent key, made by hwdb (read on each request, as it
    may appear after the UI starts)."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    os.chmod(state_dir, 0o700)
    app = Flask(__name__, static_folder=None)
    app.config.update(
        SECRET_KEY=load_or_create_secret(state_dir),
        SESSION_COOKIE_NAME="hw_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=cookie_secure,
        # The cookie may live a year (a paired kiosk); the server-side session row decides
        # how long a sign-in really lasts (accounts.SESSION_TTL).
        PERMANENT_SESSION_LIFETIME=timedelta(days=365),
        MAX_CONTENT_LENGTH=SMALL_BODY_BYTES,
        JSON_SORT_KEYS=False,
    )
    accounts = AccountStore(os.path.join(state_dir, "accounts.sqlite"))
    setup_code = SetupCode(state_dir, setup_code_file)
    if accounts.needs_setup():
        setup_code.issue()
    else:
        setup_code.spend()
    controller = ControllerClient(controller_url)
    hwdb = Hwdb(*hwdb_addr)
    hub = LiveHub(controller, hwdb, limits=stream_limits)
    sign_ins = SignInGuard()
    setup_guesses, pairing_guesses = RateLimiter(5), RateLimiter(5)
    latency_checks = RateLimiter(LATENCY_CHECKS_PER_ACCOUNT, 600)
    own_names = {host_name(h) for h in (*LOOPBACK_NAMES, *hostnames)} - {None}
    app.extensions["homework"] = {
        "accounts": accounts,
        "controller": controller,
        "hwdb": hwdb,
        "hub": hub,
        "setup_code": setup_code,
    }
    if start_live:
        hub.start()

    # --- every request: who is asking, may they, and is the request genuine -------------

    @app.before_request
    def gatekeeper():
        # A page under someone else's name that resolves to us (DNS rebinding) gets nothing.
        if host_name(request.headers.get("Host")) not in own_names:
            return _plain(400, "This router answers only to its own names and addresses.")
        addr = request.remote_addr or ""
        g.client_ip = addr
        if not is_loopback(addr):
            state = hub.device_state_for_ip(addr)
            if state is None:
                return _plain(503, "The router cannot check this device right now. Try again in a moment.")
            if state != "permitted":
                return _plain(403, "This device has not been let into the home network, so it cannot manage it.")
        view = app.view_functions.get(request.endpoint) if request.endpoint else None
        if view is None:
            return None  # 404/405 follow
        rule = getattr(view, "access", None)
        if rule is None:
            return _error(403, "this endpoint declares no access rule")
        g.user = accounts.session(session.get("sid"))
        if request.method not in SAFE_METHODS:
            origin = request.headers.get("Origin")
            if origin is not None and not same_origin(origin, request.scheme, request.host):
                return _error(403, "this request comes from another site's page", code="origin")
            expected = g.user["csrf"] if g.user else session.get("csrf")
            # As bytes: a header may carry any octet, which hmac cannot compare as text.
            sent = request.headers.get("X-CSRF-Token", "").encode("utf-8", "surrogateescape")
            if not expected or not hmac.compare_digest(sent, expected.encode()):
                return _error(403, "missing or wrong CSRF token; reload the page", code="csrf")
        if rule == PUBLIC:
            return None
        if g.user is None:
            return _error(401, "please sign in", code="signin")
        if g.user["role"] not in rule:
            return _error(403, f"a {g.user['role']} account may not do this", code="role")
        return None

    @app.after_request
    def headers(resp):
        resp.headers.setdefault("Cache-Control", "no-store")
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
            "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
        )
        return resp

    @app.errorhandler(ApiError)
    def api_error(exc):
        return _error(exc.status, str(exc), **exc.extra)

    @app.errorhandler(ControllerDownError)
    def controller_down(exc):
        hub._set_health("controller", False)
        return _error(
            503,
            "The router's controller is not answering; this page will recover when it is back.",
            component="controller",
        )

    @app.errorhandler(ControllerError)
    def controller_error(exc):
        return _error(exc.status if 400 <= exc.status < 600 else 502, str(exc), component="controller")

    @app.errorhandler(HwdbError)
    def hwdb_down(exc):
        return _error(
            503,
            f"The router's database is not answering ({exc}); this page will recover when it is back.",
            component="hwdb",
        )

    @app.errorhandler(404)
    @app.errorhandler(405)
    @app.errorhandler(413)
    def http_error(exc):
        return _error(exc.code, exc.description)

    # --- session --------------------------------------------------------------------------

    def _start_session(account: dict) -> dict:
        sid, csrf = accounts.create_session(account, request.headers.get("User-Agent", "")[:200])
        session.clear()
        session.permanent = True
        session["sid"] = sid
        if account["role"] == "member":
            # A member's own devices are the ones they sign in from.
            mac = _mac_for_ip(g.client_ip)
            if mac:
                accounts.claim_device(mac, account["id"])
        return {"user": _public_user(account), "csrf_token": csrf}

    def _mac_for_ip(ip):
        for d in hub.devices():
            if d.get("ip") == ip:
                return d["mac"]
        return None

    def _limited(wait: int):
        if wait:
            raise ApiError(429, f"too many attempts; try again in {wait} s", retry_after=wait)

    @app.get("/api/session")
    @access(PUBLIC)
    def get_session():
        user = g.user
        if user is None and "csrf" not in session:
            session["csrf"] = secrets.token_urlsafe(32)
        return {
            "setup_required": accounts.needs_setup(),
            "user": _public_user(user) if user else None,
            "csrf_token": user["csrf"] if user else session["csrf"],
            "health": hub.health,
        }

    @app.post("/api/setup")
    @access(PUBLIC)
    def setup():
        if not accounts.needs_setup():
            raise ApiError(409, "this router already has an owner")
        body = _body()
        _limited(setup_guesses.take(g.client_ip))
        if not setup_code.matches(str(body.get("setup_code") or "")):
            raise ApiError(403, "That setup code is wrong. It is on the router's label and console.", code="setup-code")
        setup_guesses.clear(g.client_ip)
        try:
            account = accounts.create_first_owner(str(body.get("username", "")), str(body.get("password", "")))
        except AlreadyOwnedError as exc:
            raise ApiError(409, str(exc)) from None
        except AccountError as exc:
            raise ApiError(400, str(exc)) from None
        setup_code.spend()
        return _start_session(account), 201

    @app.post("/api/login")
    @access(PUBLIC)
    def login():
        body = _body()
        username = str(body.get("username", ""))
        _limited(sign_ins.take(g.client_ip, username))
        account = accounts.authenticate(username, str(body.get("password", "")))
        if account is None:
            raise ApiError(401, "wrong user name or password")
        sign_ins.succeeded(g.client_ip, username)
        return _start_session(account)

    @app.post("/api/pair")
    @access(PUBLIC)
    def pair():
        body = _body()
        # Charged before the code is looked up, in one step with the check, so concurrent
        # guesses cannot slip past the count; a right code or a bad panel name (which spends
        # no code) is no guess.
        _limited(pairing_guesses.take(g.client_ip))
        try:
            account = accounts.redeem_pairing_code(str(body.get("code", "")), str(body.get("name", "")))
        except AccountError as exc:
            pairing_guesses.refund(g.client_ip)
            raise ApiError(400, str(exc)) from None
        if account is None:
            raise ApiError(400, "that pairing code is wrong or has expired")
        pairing_guesses.refund(g.client_ip)
        return _start_session(account), 201

    @app.post("/api/logout")
    @access(*SIGNED_IN)
    def logout():
        accounts.end_session(session["sid"])
        hub.end_streams(session_id=session["sid"])
        session.clear()
        return {"ok": True}

    @app.post("/api/me/password")
    @access("owner", "member")
    def change_own_password():
        body = _body()
        # The current password is guessed no faster than at sign-in, and counted the same way.
        username = g.user["username"]
        _limited(sign_ins.take(g.client_ip, username))
        if accounts.authenticate(username, str(body.get("current", ""))) is None:
            raise ApiError(403, "the current password is wrong")
        sign_ins.succeeded(g.client_ip, username)
        _account_call(accounts.set_password, g.user["id"], str(body.get("password", "")))
        hub.end_streams(account_id=g.user["id"])
        return _start_session(g.user)

    # --- accounts (owner) -----------------------------------------------------------------

    @app.get("/api/accounts")
    @access("owner")
    def list_accounts():
        owners = accounts.device_owners()
        out = []
        for a in accounts.list_accounts():
            a["devices"] = sorted(m for m, o in owners.items() if o == a["id"])
            out.append(a)
        return {"accounts": out}

    @app.post("/api/accounts")
    @access("owner")
    def create_account():
        body = _body()
        role = body.get("role", "member")
        if role not in ("owner", "member"):
            raise ApiError(400, "create owners and members here; wall panels are paired with a code")
        return _account_call(accounts.create_account, body.get("username", ""), body.get("password", ""), role), 201

    @app.delete("/api/accounts/<int:account_id>")
    @access("owner")
    def delete_account(account_id):
        try:
            _account_call(accounts.delete_account, account_id)
        except KeyError:
            raise ApiError(404, "no such account") from None
        hub.end_streams(account_id=account_id)
        return {"ok": True}

    @app.post("/api/accounts/<int:account_id>/password")
    @access("owner")
    def reset_password(account_id):
        if accounts.get_account(account_id) is None:
            raise ApiError(404, "no such account")
        _account_call(accounts.set_password, account_id, str(_body().get("password", "")))
        hub.end_streams(account_id=account_id)
        return {"ok": True}

    @app.post("/api/pairing-codes")
    @access("owner")
    def new_pairing_code():
        code, expires = accounts.create_pairing_code(g.user["id"])
        return {"code": code, "expires": expires}, 201

    # --- devices --------------------------------------------------------------------------

    @app.get("/api/devices")
    @access(*SIGNED_IN)
    def list_devices():
        if hub.refresh_devices() is None:
            raise ControllerDownError("status")
        return {"devices": _with_owners(hub.devices()), "health": hub.health}

    @app.get("/api/devices/<mac>")
    @access(*SIGNED_IN)
    def device_detail(mac):
        mac = _mac(mac)
        hub.update_device(controller.device(mac))
        device = next(d for d in _with_owners(hub.devices()) if d["mac"] == mac)
        if g.user["role"] != "kiosk":
            device["dns"] = _dns_rules(mac)
        return {"device": device}

    def _decision(action):
        def view(mac):
            try:
                device = controller.decide(action, _mac(mac))
            except ControllerError as exc:
                if exc.status == 409:  # the controller's word: a blacklist is lifted only by whitelist
                    raise ApiError(409, str(exc), code="blacklisted", component="controller") from None
                raise
            hub.update_device(device)
            return {"device": device}

        view.__name__ = f"device_{action}"
        return view

    app.post("/api/devices/<mac>/permit")(access("owner", "kiosk")(_decision("permit")))
    app.post("/api/devices/<mac>/deny")(access("owner", "kiosk")(_decision("deny")))
    app.post("/api/devices/<mac>/blacklist")(access("owner")(_decision("blacklist")))
    app.post("/api/devices/<mac>/whitelist")(access("owner")(_decision("whitelist")))

    def _own_device(mac: str, what: str) -> str:
        """The device's MAC, if the signed-in owner or member may `what` for it: an owner for
        any device, a member only for the devices they signed in from or were given."""
        mac = _mac(mac)
        if g.user["role"] == "member" and accounts.device_owners().get(mac) != g.user["id"]:
            raise ApiError(403, f"members may {what} only their own devices", code="role")
        return mac

    @app.post("/api/devices/<mac>/name")
    @access("owner", "member")
    def rename_device(mac):
        mac = _own_device(mac, "name")
        name = _account_call(printable_name, str(_body().get("name", "")), 64, "a device name", True)
        device = controller.rename(mac, name)
        hub.update_device(device)
        return {"device": device}

    @app.post("/api/devices/<mac>/owner")
    @access("owner")
    def set_device_owner(mac):
        account_id = _body().get("account_id")
        if not isinstance(account_id, int) or accounts.get_account(account_id) is None:
            raise ApiError(400, "account_id must name an account")
        accounts.claim_device(_mac(mac), account_id, force=True)
        return {"ok": True}

    @app.post("/api/devices/<mac>/dns-blocks")
    @access("owner")
    def block_domain(mac):
        return _dns_change("deny-dns", mac)

    @app.post("/api/devices/<mac>/dns-unblocks")
    @access("owner")
    def unblock_domain(mac):
        return _dns_change("permit-dns", mac)

    def _dns_change(action, mac):
        mac = _mac(mac)
        domain = str(_body().get("domain", "")).strip().lower().rstrip(".")
        if not DOMAIN_RE.match(domain):
            raise ApiError(400, "not a domain name")
        try:
            controller.dns(action, mac, domain)
        except ControllerError as exc:
            if exc.status == 501:
                raise ApiError(
                    501, "This router cannot block names for a device yet.", code="dns-unavailable"
                ) from None
            raise
        return {"dns": _dns_rules(mac)}

    def _dns_rules(mac):
        try:
            return {"available": True, "rules": controller.dns_rules(mac)}
        except ControllerError as exc:
            if exc.status == 501:
                return {"available": False, "rules": []}
            raise

    # --- a device's own Wi-Fi passphrase ---------------------------------------------------
    # Owners and members on their own devices, never a wall panel's kiosk session: a
    # passphrase on the panel is read by every guest in the room (an owner who signs in on the
    # panel may, and sees it there by choice). The answers are never logged nor cached.

    @app.post("/api/devices/<mac>/wifi-key")
    @access("owner", "member")
    def issue_wifi_key(mac):
        mac = _own_device(mac, "make a Wi-Fi passphrase")
        issued = _wifi_key_call(controller.issue_wifi_key, mac)
        _refresh_device(mac)
        return _no_store({"wifi_key": _wifi_key_fields(issued, WIFI_KEY_FIELDS + ("applied", "note"))})

    @app.get("/api/devices/<mac>/wifi-key")
    @access("owner", "member")
    def show_wifi_key(mac):
        mac = _own_device(mac, "see the Wi-Fi passphrase of")
        return _no_store({"wifi_key": _wifi_key_fields(_wifi_key_call(controller.show_wifi_key, mac), WIFI_KEY_FIELDS)})

    @app.post("/api/devices/<mac>/wifi-key/revoke")
    @access("owner", "member")
    def revoke_wifi_key(mac):
        mac = _own_device(mac, "revoke the Wi-Fi passphrase of")
        revoked = _wifi_key_call(controller.revoke_wifi_key, mac)
        _refresh_device(mac)
        return _no_store({"revoked": _wifi_key_fields(revoked, ("mac", "revoked", "applied", "note"))})

    def _wifi_key_call(call, mac: str) -> dict:
        try:
            return call(mac)
        except ControllerError as exc:
            if exc.status == 501:
                raise ApiError(501, WIFI_KEYS_UNAVAILABLE, code="wifi-keys-unavailable") from None
            if exc.status == 404:
                raise ApiError(404, str(exc), code="no-wifi-key") from None
            raise

    def _refresh_device(mac: str) -> None:
        """Every page learns that the device has (or no longer has) a passphrase of its own.
        The change is made: a controller that stops answering just now costs only the update."""
        try:
            hub.update_device(controller.device(mac))
        except (ControllerDownError, ControllerError):
            pass

    # --- applications and priorities --------------------------------------------------------

    @app.get("/api/apps")
    @access(*APP_ROLES)
    def list_apps():
        span = request.args.get("range", "hour")
        if span not in APP_RANGES:
            raise ApiError(400, f"range is one of {', '.join(APP_RANGES)}")
        seconds, nbuckets = APP_RANGES[span]
        width = seconds / nbuckets
        now = time.time()
        start = now - seconds
        series: dict[str, list[int]] = {}
        for tstamp, app_name, nbytes in hwdb.query(
            f"select tstamp, app, bytes from AppTimeseries [range {seconds} seconds]"
        ).tuples:
            idx = min(nbuckets - 1, max(0, int((tstamp / 1e9 - start) / width)))
            series.setdefault(app_name, [0] * nbuckets)[idx] += nbytes
        current = {
            r["app"]: r["b"]
            for r in hwdb.query("select app, sum(bytes) as b from AppTimeseries [range 10 seconds] group by app").rows
        }
        priorities = {**_router_priorities(), **hwdb.priorities()}  # the household's own choice wins
        alerts = [
            {"time": r["tstamp"] / 1e9, "kind": r["kind"], "message": r["message"]}
            for r in hwdb.query(
                f"select tstamp, kind, message from Events [range 1 hours] " f"where kind = '{OVERLOAD_KIND}'"
            ).rows
        ]
        names = set(series) | set(priorities)
        apps = [
            {
                "app": a,
                "priority": priorities.get(a, "default"),
                "bytes_per_s": round(current.get(a, 0) / 10),
                "total_bytes": sum(series.get(a, [])),
                "series": series.get(a, [0] * nbuckets),
            }
            for a in names
        ]
        apps.sort(key=lambda a: (-a["total_bytes"], a["app"].lower()))
        return {"range": span, "start": start, "bucket_seconds": width, "apps": apps, "alerts": alerts[-5:]}

    def _router_priorities() -> dict[str, str]:
        """What the router's app table gives each app until the household chooses (a call is High)."""
        try:
            listed = controller.apps()
        except (ControllerDownError, ControllerError):
            return {}
        return {
            a["app"]: a["priority"]
            for a in listed
            if isinstance(a, dict)
            and isinstance(a.get("app"), str)
            and APP_RE.match(a["app"])
            and a.get("priority") in PRIORITIES
        }

    @app.put("/api/apps/<path:app_name>/priority")
    @access(*APP_ROLES)
    def set_priority(app_name):
        if not APP_RE.match(app_name):
            raise ApiError(400, "not an application name")
        priority = _body().get("priority")
        if priority not in PRIORITIES:
            raise ApiError(400, f"priority is one of {', '.join(PRIORITIES)}")
        hwdb.set_priority(app_name, priority)
        return {"app": app_name, "priority": priority}

    # --- the "latency under load" check ------------------------------------------------------

    @app.get("/api/latency-check")
    @access(*APP_ROLES)
    def latency_history():
        rows = hwdb.query(
            f"select tstamp, {', '.join(LATENCY_COLUMNS)} from LatencyChecks " f"[rows {LATENCY_HISTORY}]"
        ).rows
        results = [{"time": r.pop("tstamp") / 1e9, **r} for r in reversed(rows)]
        state = {"configured": latency_check is not None, "results": results, "qos": _shaper()}
        if latency_check is None:
            return {**state, "message": LATENCY_UNCONFIGURED}
        return {
            **state,
            "running": latency_check.running,
            "duration_s": latency_check.duration,
            "target": latency_check.target.address,
        }

    @app.post("/api/latency-check")
    @access(*APP_ROLES)
    def run_latency_check():
        if latency_check is None:
            raise ApiError(501, LATENCY_UNCONFIGURED, code="latency-unconfigured")
        key = str(g.user["id"])
        _limited(latency_checks.retry_after(key))
        if latency_check.running:
            raise ApiError(409, LATENCY_RUNNING, code="latency-running")
        latency_checks.charge(key)
        try:
            result = latency_check.run()
        except CheckRunning:
            latency_checks.refund(key)
            raise ApiError(409, LATENCY_RUNNING, code="latency-running") from None
        except TargetError as exc:
            raise ApiError(502, f"The connection check could not run: {exc}.", code="latency-target") from None
        try:
            hwdb.query(
                "insert into LatencyChecks values ({}, {}, {}, {}, {}, {}, {}, {})".format(
                    quote(result["grade"]),
                    *(float(result[c]) for c in LATENCY_COLUMNS[1:5]),
                    int(result["down_kbit"]),
                    int(result["up_kbit"]),
                    float(result["loss_pct"]),
                )
            )
            recorded = True
        except HwdbError:
            recorded = False  # the household still sees the result it waited for
        return {"result": {"time": time.time(), **result}, "recorded": recorded}

    def _shaper() -> dict | None:
        """Which queue discipline the router's shaper uses, when the controller says."""
        try:
            qos = controller.health().get("qos")
        except (ControllerDownError, ControllerError, AttributeError):
            return None
        # The controller reports each shaped link: {"uplink": {"shaped_kbit", "leaf_qdisc", ...}, "downlink": ...}
        reported = [(way, qos.get(way)) for way in ("uplink", "downlink")] if isinstance(qos, dict) else []
        links: dict[str, dict] = {
            way: link
            for way, link in reported
            if isinstance(link, dict) and isinstance(link.get("leaf_qdisc"), str) and link["leaf_qdisc"]
        }
        if not links:
            return None
        rates = {
            f"{way}_kbit": link["shaped_kbit"]
            for way, link in links.items()
            if isinstance(link.get("shaped_kbit"), int) and not isinstance(link["shaped_kbit"], bool)
        }
        return {"leaf": next(iter(links.values()))["leaf_qdisc"][:32], **rates}

    # --- live updates -------------------------------------------------------------------------

    @app.get("/api/events")
    @access(*SIGNED_IN)
    def events():
        role, sid = g.user["role"], session["sid"]
        client = hub.register(role, sid, g.user["id"])
        if client is None:
            raise ApiError(429, "too many live pages are open; close some and this one will reconnect", retry_after=5)
        first = [("health", hub.health), ("devices", _with_owners(hub.devices()))]
        # waitress reads ahead on the connection, so it knows when the page has gone: the
        # stream's slot is given back within a second rather than at the next write.
        disconnected = request.environ.get("waitress.client_disconnected", lambda: False)

        def stream():
            yield "retry: 2000\n\n"
            for name, data in first:
                yield f"event: {name}\ndata: {json.dumps(data)}\n\n"
            next_keepalive = time.monotonic() + KEEPALIVE_SECONDS
            while not client.ended and not disconnected():
                try:
                    message = client.queue.get(timeout=1.0)
                except queue.Empty:
                    if time.monotonic() < next_keepalive:
                        continue
                    # Sign-out and deletion end streams at once; this catches expiry.
                    if accounts.session(sid) is None:
                        return
                    next_keepalive = time.monotonic() + KEEPALIVE_SECONDS
                    message = ": keepalive\n\n"
                if message is None:
                    return
                yield message

        resp = Response(
            stream(), mimetype="text/event-stream", headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )
        # The server closes every response it was given, even one it never started to send.
        resp.call_on_close(lambda: hub.unregister(client))
        return resp

    # --- firmware updates (owner) ---------------------------------------------------------------

    @app.get("/api/update")
    @access("owner")
    def update_status():
        if update_spool is None:
            return {"available": False, "message": UPDATES_UNCONFIGURED}
        return {
            "available": True,
            "max_bytes": update_spool.max_bytes,
            "chunk_bytes": CHUNK_BYTES,
            **update_spool.status(),
        }

    @app.post("/api/update")
    @access("owner")
    def start_update():
        _update_call(lambda spool: spool.start(_body().get("size")))
        return update_status(), 201

    @app.put(UPLOAD_PATH)
    @access("owner")
    def upload_update_piece():
        if request.mimetype != "application/octet-stream":
            raise ApiError(415, "Send the update bundle itself (application/octet-stream).", code="update-type")
        offset = request.args.get("offset", type=int)
        if offset is None or offset < 0:
            raise ApiError(400, "Say where this piece goes (?offset=N).", code="update-piece")
        # A piece is far larger than any other request this API takes.
        request.max_content_length = CHUNK_BYTES
        _update_call(lambda spool: spool.receive(offset, request.content_length, lambda: request.stream))
        return update_status()

    def _update_call(call) -> None:
        if update_spool is None:
            raise ApiError(501, UPDATES_UNCONFIGURED, code="updates-unconfigured")
        try:
            call(update_spool)
        except UpdateError as exc:
            raise ApiError(exc.status, str(exc), code=exc.code, **exc.extra) from None

    # --- the household's agent key (owner) -------------------------------------------------------

    @app.get("/api/agent-key")
    @access("owner")
    def agent_key():
        if agent_key_file is None:
            raise ApiError(404, AGENT_KEY_UNCONFIGURED, code="agent-key-unconfigured")
        try:
            with open(agent_key_file) as f:
                key = f.read(AGENT_KEY_LENGTH + 2).strip()
        except FileNotFoundError:
            key = ""
        if not AGENT_KEY_RE.match(key):
            raise ApiError(404, AGENT_KEY_MISSING, code="no-agent-key")
        return _no_store({"key": key, "command": f"endhost-agent --router-key {key}"})

    @app.get("/api/health")
    @access(PUBLIC)
    def health():
        return {"health": hub.health}

    # --- the single-page app ----------------------------------------------------------------

    @app.get("/")
    @access(PUBLIC)
    def index():
        if not os.path.exists(os.path.join(dist_dir, "index.html")):
            return _plain(503, "The web UI has not been built: run `make -C webui build`.")
        resp = send_from_directory(dist_dir, "index.html")
        resp.headers["Cache-Control"] = "no-cache"
        return resp

    @app.get("/assets/<path:name>")
    @access(PUBLIC)
    def assets(name):
        resp = send_from_directory(os.path.join(dist_dir, "assets"), name)
        # Vite puts a content hash in every asset name, so they never change.
        resp.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        return resp

    @app.get("/favicon.svg")
    @access(PUBLIC)
    def favicon():
        return send_from_directory(dist_dir, "favicon.svg")

    # --- helpers ------------------------------------------------------------------------------

    def _with_owners(devices):
        owners = accounts.device_owners()
        for d in devices:
            d["owner_id"] = owners.get(d["mac"])
        return devices

    # A device already held back is answered before Flask does any work (cookie, database,
    # routing), so a flood of guesses costs the router as little as it can; behind waitress
    # such requests also wait in a lane of their own (serving.HeldBackLane).
    held_back = HeldBack(
        {
            "/api/login": sign_ins.devices,
            "/api/me/password": sign_ins.devices,
            "/api/setup": setup_guesses,
            "/api/pair": pairing_guesses,
        }
    )
    app.extensions["homework"]["held_back"] = held_back

    cookie_reader = app.session_interface.get_signing_serializer(app)  # type: ignore[attr-defined]

    def body_limit(method: str, path: str, cookie_header: str) -> int:
        """The largest body a request may have, decided on its headers (serving.BodyLimitParser),
        before the server reads any of it: an update piece from a signed-in owner when an update
        spool is configured, a small JSON body otherwise."""
        if update_spool is None or method != "PUT" or path != UPLOAD_PATH:
            return SMALL_BODY_BYTES
        try:
            signed = parse_cookie(cookie_header).get(app.config["SESSION_COOKIE_NAME"]) or ""
            sid = cookie_reader.loads(signed, max_age=int(app.permanent_session_lifetime.total_seconds())).get("sid")
        except (BadSignature, AttributeError):
            return SMALL_BODY_BYTES
        user = accounts.session(sid)
        return CHUNK_BYTES if user is not None and user["role"] == "owner" else SMALL_BODY_BYTES

    app.extensions["homework"]["body_limit"] = body_limit
    app.wsgi_app = _refuse_held_back(app.wsgi_app, held_back)  # type: ignore[method-assign]
    return app


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


def _account_call(fn, *args):
    try:
        return fn(*args)
    except AccountError as exc:
        raise ApiError(400, str(exc)) from None


def _public_user(user: dict) -> dict:
    return {"id": user["id"], "username": user["username"], "role": user["role"]}


def _body() -> dict:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, "send a JSON object")
    return body


def _mac(text: str) -> str:
    mac = text.strip().lower().replace("-", ":")
    if not MAC_RE.match(mac):
        abort(400, f"not a MAC address: {text!r}")
    return mac


def _wifi_key_fields(answer, fields: tuple[str, ...]) -> dict:
    if not isinstance(answer, dict):
        raise ControllerError(502, "the controller's answer about the passphrase is not an object")
    return {f: answer.get(f) for f in fields}


def _no_store(body: dict, status: int = 200):
    """An answer with a secret in it: no browser or proxy may keep a copy."""
    resp = jsonify(body)
    resp.status_code = status
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Pragma"] = "no-cache"
    return resp


def _error(status: int, message: str, **extra):
    resp = jsonify({"error": message, **extra})
    resp.status_code = status
    if "retry_after" in extra:
        resp.headers["Retry-After"] = str(extra["retry_after"])
    return resp


def _plain(status: int, message: str):
    return Response(message + "\n", status=status, mimetype="text/plain")
