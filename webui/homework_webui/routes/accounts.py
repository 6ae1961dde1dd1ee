"""Signing in and out (first owner's setup, a wall panel's pairing), one's own password, the
household's accounts (owner), and the agent key the owner gives end-host agents."""

from __future__ import annotations

import json
import os
import re
import secrets

from flask import Blueprint, g, request, session

from ..accounts import AccountError, AlreadyOwnedError, printable_name
from ..errors import ApiError
from ..security import PUBLIC, SIGNED_IN, access, normalise_code
from ..services import services
from .bedtime import forget_person_allowance, reshare
from .common import account_call, body, limited, no_store

bp = Blueprint("accounts", __name__)

# The key end-host agents check the router by (hwdb writes it: 64 lowercase hex characters).
AGENT_KEY_LENGTH = 64
AGENT_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
AGENT_KEY_UNCONFIGURED = (
    "This router has no agent key configured (the web UI's --agent-key-file option), so end-host "
    "agents cannot check that they talk to it."
)
AGENT_KEY_MISSING = "The router has not made its agent key yet (hwdb makes it when it starts); try again in a moment."


def _public_user(user: dict) -> dict:
    return {"id": user["id"], "username": user["username"], "role": user["role"]}


def _start_session(account: dict) -> dict:
    svc = services()
    sid, csrf = svc.accounts.create_session(account, _user_agent())
    session.clear()
    session.permanent = True
    session["sid"] = sid
    if account["role"] == "member":
        # A member's own devices are the ones they sign in from.
        mac = next((d["mac"] for d in svc.hub.devices() if d.get("ip") == g.client_ip), None)
        if mac:
            svc.accounts.claim_device(mac, account["id"])
            reshare(account["id"])  # a device of theirs shares their allowance
    return {"user": _public_user(account), "csrf_token": csrf}


def _user_agent() -> str:
    return request.headers.get("User-Agent", "")[:200]


@bp.get("/api/session")
@access(PUBLIC)
def get_session():
    svc, user = services(), g.user
    if user is None and "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return {
        "setup_required": svc.accounts.needs_setup(),
        # The first-run page may also make this box an access point of the household's router.
        "can_be_access_point": svc.role_spool is not None and svc.accounts.needs_setup(),
        "user": _public_user(user) if user else None,
        "csrf_token": user["csrf"] if user else session["csrf"],
        "health": svc.hub.health,
    }


@bp.post("/api/setup")
@access(PUBLIC)
def setup():
    svc = services()
    if not svc.accounts.needs_setup():
        raise ApiError(409, "this router already has an owner")
    sent = body()
    _box_setup_code(sent)
    try:
        account = svc.accounts.create_first_owner(str(sent.get("username", "")), str(sent.get("password", "")))
    except AlreadyOwnedError as exc:
        raise ApiError(409, str(exc)) from None
    except AccountError as exc:
        raise ApiError(400, str(exc)) from None
    svc.setup_code.spend()
    return _start_session(account), 201


def _box_setup_code(sent: dict) -> None:
    """The first run's proof that the household holds the box: its setup code (its label, its console), a few
    guesses per address (403 `setup-code` for a wrong one, 429 past the guesses)."""
    svc = services()
    limited(svc.setup_guesses.take(g.client_ip))
    if not svc.setup_code.matches(str(sent.get("setup_code") or "")):
        raise ApiError(403, "That setup code is wrong. It is on the box's label and console.", code="setup-code")
    svc.setup_guesses.clear(g.client_ip)


# The router's pairing code for an access point (its web UI makes 8 characters), as the router reads it.
ACCESS_POINT_CODE_RE = re.compile(r"^[A-Z0-9]{4,64}$")
ROLE_REQUEST = "request"  # homework_image.role reads it from the spool


@bp.post("/api/setup/access-point")
@access(PUBLIC)
def setup_access_point():
    """First run only, with this box's setup code: it becomes an access point of the household's router
    (docs/whole-home-wifi.md). The image's root job (homework_image.role, started when the request lands in
    the spool) writes the role and the code and restarts the box, which then pairs with the router."""
    svc = services()
    if svc.role_spool is None:
        raise ApiError(404, "this box can only be a router")
    if not svc.accounts.needs_setup():
        raise ApiError(409, "this router already has an owner")
    sent = body()
    # As for an owner: a device on the LAN reaching a fresh box's page first must not turn the household's new
    # router into an access point of its own router (and restart it).
    _box_setup_code(sent)
    code = normalise_code(str(sent.get("code") or ""))  # typed loosely: case, spaces and dashes do not matter
    if not ACCESS_POINT_CODE_RE.match(code):
        raise ApiError(400, "That is not a pairing code: your router's web UI shows one under Add an access point.")
    name = account_call(printable_name, str(sent.get("name") or "").strip() or "Access point", 32, "the name")
    request_doc = json.dumps({"role": "satellite", "code": code, "name": name}).encode()
    tmp = os.path.join(svc.role_spool, f".{ROLE_REQUEST}.{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(request_doc)
        os.replace(tmp, os.path.join(svc.role_spool, ROLE_REQUEST))
    except OSError as exc:
        raise ApiError(503, f"the box could not take the choice: {exc.strerror}") from None
    return {"ok": True, "restarting": True}, 202


@bp.post("/api/login")
@access(PUBLIC)
def login():
    svc, sent = services(), body()
    username = str(sent.get("username", ""))
    limited(svc.sign_ins.take(g.client_ip, username))
    account = svc.accounts.authenticate(username, str(sent.get("password", "")))
    if account is None:
        raise ApiError(401, "wrong user name or password")
    svc.sign_ins.succeeded(g.client_ip, username)
    return _start_session(account)


@bp.post("/api/pair")
@access(PUBLIC)
def pair():
    svc, sent = services(), body()
    # Charged before the code is looked up, in one step with the check, so concurrent
    # guesses cannot slip past the count; a right code or a bad panel name (which spends
    # no code) is no guess.
    limited(svc.pairing_guesses.take(g.client_ip))
    try:
        account = svc.accounts.redeem_pairing_code(str(sent.get("code", "")), str(sent.get("name", "")))
    except AccountError as exc:
        svc.pairing_guesses.refund(g.client_ip)
        raise ApiError(400, str(exc)) from None
    if account is None:
        raise ApiError(400, "that pairing code is wrong or has expired")
    svc.pairing_guesses.refund(g.client_ip)
    return _start_session(account), 201


@bp.post("/api/logout")
@access(*SIGNED_IN)
def logout():
    svc = services()
    svc.accounts.end_session(session["sid"])
    svc.hub.end_streams(session_id=session["sid"])
    session.clear()
    return {"ok": True}


@bp.post("/api/me/password")
@access("owner", "member")
def change_own_password():
    svc, sent = services(), body()
    # The current password is guessed no faster than at sign-in, and counted the same way.
    username = g.user["username"]
    limited(svc.sign_ins.take(g.client_ip, username))
    if svc.accounts.authenticate(username, str(sent.get("current", ""))) is None:
        raise ApiError(403, "the current password is wrong")
    svc.sign_ins.succeeded(g.client_ip, username)
    account_call(svc.accounts.set_password, g.user["id"], str(sent.get("password", "")))
    svc.hub.end_streams(account_id=g.user["id"])
    return _start_session(g.user)


# --- the household's accounts (owner) ---------------------------------------------------------


@bp.get("/api/accounts")
@access("owner")
def list_accounts():
    accounts = services().accounts
    owners = accounts.device_owners()
    out = []
    for a in accounts.list_accounts():
        a["devices"] = sorted(m for m, o in owners.items() if o == a["id"])
        out.append(a)
    return {"accounts": out}


@bp.post("/api/accounts")
@access("owner")
def create_account():
    sent = body()
    role = sent.get("role", "member")
    if role not in ("owner", "member"):
        raise ApiError(400, "create owners and members here; wall panels are paired with a code")
    created = account_call(services().accounts.create_account, sent.get("username", ""), sent.get("password", ""), role)
    return created, 201


@bp.delete("/api/accounts/<int:account_id>")
@access("owner")
def delete_account(account_id):
    svc = services()
    try:
        account_call(svc.accounts.delete_account, account_id)
    except KeyError:
        raise ApiError(404, "no such account") from None
    svc.hub.end_streams(account_id=account_id)
    forget_person_allowance(account_id)
    return {"ok": True}


@bp.post("/api/accounts/<int:account_id>/password")
@access("owner")
def reset_password(account_id):
    svc = services()
    if svc.accounts.get_account(account_id) is None:
        raise ApiError(404, "no such account")
    account_call(svc.accounts.set_password, account_id, str(body().get("password", "")))
    svc.hub.end_streams(account_id=account_id)
    return {"ok": True}


@bp.post("/api/pairing-codes")
@access("owner")
def new_pairing_code():
    code, expires = services().accounts.create_pairing_code(g.user["id"])
    return {"code": code, "expires": expires}, 201


@bp.get("/api/agent-key")
@access("owner")
def agent_key():
    key_file = services().agent_key_file
    if key_file is None:
        raise ApiError(404, AGENT_KEY_UNCONFIGURED, code="agent-key-unconfigured")
    try:
        with open(key_file) as f:
            key = f.read(AGENT_KEY_LENGTH + 2).strip()
    except FileNotFoundError:
        key = ""
    if not AGENT_KEY_RE.match(key):
        raise ApiError(404, AGENT_KEY_MISSING, code="no-agent-key")
    return no_store({"key": key, "command": f"endhost-agent --router-key {key}"})
