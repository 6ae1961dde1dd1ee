"""Accounts, sessions, kiosk pairing codes and device ownership, in one SQLite file.

The file lives in the state directory with 0600 permissions (SQLite gives its -wal and
-shm files the database file's permissions). Every change is one transaction, so a
power cut leaves either the old or the new state.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import sqlite3
import threading
import time

ROLES = ("owner", "member", "kiosk")
MIN_PASSWORD = 8
# scrypt at N=2^15, r=8 costs 32 MiB and ~0.1 s on a router-class CPU: slow enough to make
# guessing a stolen hash expensive, fast enough for a login.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 15, 8, 1
PAIRING_TTL = 600.0
SESSION_TTL = {"owner": 30 * 86400, "member": 30 * 86400, "kiosk": 365 * 86400}


class AccountError(ValueError):
    pass


def hash_password(password: str) -> str:
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                            maxmem=64 * 1024 * 1024, dklen=32)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt)}${b64(digest)}"


def verify_password(password: str, encoded: str | None) -> bool:
    if not encoded:
        # Still pay for one hash so that a missing user takes as long as a wrong password.
        hash_password(password)
        return False
    _, n, r, p, salt, digest = encoded.split("$")
    got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                         maxmem=64 * 1024 * 1024, dklen=32)
    return hmac.compare_digest(got, base64.b64decode(digest))


def _token_hash(token: str) -> str:
    # Only hashes of session ids and pairing codes are stored: a copy of the database
    # does not let anyone sign in.
    return hashlib.sha256(token.encode()).hexdigest()


SCHEMA = """
create table if not exists accounts (
    id integer primary key, username text unique not null, role text not null,
    pw_hash text, created real not null);
create table if not exists sessions (
    id_hash text primary key, account_id integer not null references accounts(id) on delete cascade,
    csrf text not null, created real not null, expires real not null, client text not null default '');
create table if not exists pairing_codes (
    code_hash text primary key, expires real not null, created_by integer not null);
create table if not exists device_owners (
    mac text primary key, account_id integer not null references accounts(id) on delete cascade);
"""


class AccountStore:
    def __init__(self, path: str):
        self.path = path
        if path != ":memory:":
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
            os.close(fd)
            os.chmod(path, 0o600)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("pragma journal_mode=wal")
        self._db.execute("pragma synchronous=full")
        self._db.execute("pragma foreign_keys=on")
        self._db.executescript(SCHEMA)

    def _tx(self, sql: str, args=()) -> list[sqlite3.Row]:
        with self._lock:
            self._db.execute("begin immediate")
            try:
                rows = self._db.execute(sql, args).fetchall()
                self._db.execute("commit")
            except BaseException:
                self._db.execute("rollback")
                raise
            return rows

    def _read(self, sql: str, args=()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # accounts

    def needs_setup(self) -> bool:
        return not self._read("select 1 from accounts where role = 'owner' limit 1")

    def create_account(self, username: str, password: str | None, role: str) -> dict:
        username = (username or "").strip()
        if role not in ROLES:
            raise AccountError(f"role must be one of {', '.join(ROLES)}")
        if not 1 <= len(username) <= 40 or any(ord(c) < 32 for c in username):
            raise AccountError("a user name is 1 to 40 printable characters")
        if role != "kiosk" and (password is None or len(password) < MIN_PASSWORD):
            raise AccountError(f"a password needs at least {MIN_PASSWORD} characters")
        pw_hash = hash_password(password) if role != "kiosk" else None
        try:
            rows = self._tx("insert into accounts (username, role, pw_hash, created) values (?, ?, ?, ?) "
                            "returning id", (username, role, pw_hash, time.time()))
        except sqlite3.IntegrityError:
            raise AccountError(f"there is already an account called {username!r}")
        return {"id": rows[0]["id"], "username": username, "role": role}

    def create_first_owner(self, username: str, password: str) -> dict:
        """Only while no owner exists; the check and insert share one lock so two browsers
        racing through the first-run page cannot both become owner."""
        with self._lock:
            exists = self._db.execute("select 1 from accounts where role = 'owner'").fetchone()
        if exists:
            raise AccountError("this router already has an owner")
        return self.create_account(username, password, "owner")

    def authenticate(self, username: str, password: str) -> dict | None:
        rows = self._read("select id, username, role, pw_hash from accounts where username = ? and role != 'kiosk'",
                          ((username or "").strip(),))
        if not verify_password(password or "", rows[0]["pw_hash"] if rows else None):
            return None
        return {"id": rows[0]["id"], "username": rows[0]["username"], "role": rows[0]["role"]}

    def set_password(self, account_id: int, password: str) -> None:
        if len(password or "") < MIN_PASSWORD:
            raise AccountError(f"a password needs at least {MIN_PASSWORD} characters")
        self._tx("update accounts set pw_hash = ? where id = ? and role != 'kiosk'",
                 (hash_password(password), account_id))
        # A new password signs every other browser out.
        self._tx("delete from sessions where account_id = ?", (account_id,))

    def list_accounts(self) -> list[dict]:
        return [dict(r) for r in self._read("select id, username, role, created from accounts order by id")]

    def get_account(self, account_id: int) -> dict | None:
        rows = self._read("select id, username, role from accounts where id = ?", (account_id,))
        return dict(rows[0]) if rows else None

    def delete_account(self, account_id: int) -> None:
        account = self.get_account(account_id)
        if account is None:
            raise KeyError(account_id)
        if account["role"] == "owner" and len(self._read("select 1 from accounts where role = 'owner'")) == 1:
            raise AccountError("the last owner cannot be removed")
        self._tx("delete from accounts where id = ?", (account_id,))

    # sessions

    def create_session(self, account: dict, client: str = "") -> tuple[str, str]:
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = time.time()
        self._tx("delete from sessions where expires < ?", (now,))
        self._tx("insert into sessions (id_hash, account_id, csrf, created, expires, client) values (?, ?, ?, ?, ?, ?)",
                 (_token_hash(sid), account["id"], csrf, now, now + SESSION_TTL[account["role"]], client))
        return sid, csrf

    def session(self, sid: str | None) -> dict | None:
        if not sid:
            return None
        rows = self._read("select a.id, a.username, a.role, s.csrf from sessions s join accounts a "
                          "on a.id = s.account_id where s.id_hash = ? and s.expires > ?", (_token_hash(sid), time.time()))
        return dict(rows[0]) if rows else None

    def end_session(self, sid: str) -> None:
        self._tx("delete from sessions where id_hash = ?", (_token_hash(sid),))

    # kiosk pairing

    def create_pairing_code(self, owner_id: int) -> tuple[str, float]:
        # 8 characters from an alphabet without look-alikes: easy to type on a wall panel,
        # and with 10 minutes' life plus the rate limit, not guessable.
        alphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
        code = "".join(secrets.choice(alphabet) for _ in range(8))
        expires = time.time() + PAIRING_TTL
        self._tx("delete from pairing_codes where expires < ?", (time.time(),))
        self._tx("insert into pairing_codes (code_hash, expires, created_by) values (?, ?, ?)",
                 (_token_hash(code), expires, owner_id))
        return code, expires

    def redeem_pairing_code(self, code: str, kiosk_name: str) -> dict | None:
        code = (code or "").strip().upper().replace("-", "").replace(" ", "")
        rows = self._tx("delete from pairing_codes where code_hash = ? and expires > ? returning created_by",
                        (_token_hash(code), time.time()))
        if not rows:
            return None
        name = (kiosk_name or "").strip() or "Wall panel"
        base, n = name[:32], 1
        while True:
            try:
                return self.create_account(name, None, "kiosk")
            except AccountError:
                n += 1
                name = f"{base} {n}"

    # device ownership (what a member may rename)

    def claim_device(self, mac: str, account_id: int, force: bool = False) -> None:
        verb = "insert or replace" if force else "insert or ignore"
        self._tx(f"{verb} into device_owners (mac, account_id) values (?, ?)", (mac, account_id))

    def device_owners(self) -> dict[str, int]:
        return {r["mac"]: r["account_id"] for r in self._read("select mac, account_id from device_owners")}
