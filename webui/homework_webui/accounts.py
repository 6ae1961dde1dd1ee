"""Accounts, sessions, kiosk and satellite pairing codes and device ownership, in one SQLite file.

The file lives in the state directory with 0600 permissions (SQLite gives its -wal and
-shm files the database file's permissions). Every change, with the checks it depends on,
is one transaction, so a power cut leaves either the old or the new state and concurrent
requests cannot interleave. A damaged file is kept aside and the store starts empty, which
needs the setup code again (see security.SetupCode).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import itertools
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence

from .security import normalise_code, random_code

LOG = logging.getLogger(__name__)

ROLES = ("owner", "member", "kiosk", "satellite")
# Accounts that never sign in with a password: paired with a code the owner made (a wall panel, a satellite
# access point, which is bound to its own device's MAC).
PAIRED = ("kiosk", "satellite")
MIN_PASSWORD = 8
# scrypt at N=2^15, r=8 costs 32 MiB and ~0.1 s on a router-class CPU: slow enough to make
# guessing a stolen hash expensive, fast enough for a login.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
PAIRING_TTL = 600.0
PANEL_CODES, SATELLITE_CODES = "pairing_codes", "satellite_codes"  # the tables of one-time pairing codes
SESSION_TTL = {"owner": 30 * 86400, "member": 30 * 86400, "kiosk": 365 * 86400, "satellite": 365 * 86400}


class AccountError(ValueError):
    pass


class AlreadyOwnedError(AccountError):
    """First run is over: an owner exists."""


def hash_password(password: str) -> str:
    salt = os.urandom(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=64 * 1024 * 1024, dklen=32
    )
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def verify_password(password: str, encoded: str | None) -> bool:
    if not encoded:
        # Still pay for one hash so that a missing user takes as long as a wrong password.
        hash_password(password)
        return False
    _, n, r, p, salt, digest = encoded.split("$")
    got = hashlib.scrypt(
        password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p), maxmem=64 * 1024 * 1024, dklen=32
    )
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
create table if not exists satellite_codes (
    code_hash text primary key, expires real not null, created_by integer not null);
create table if not exists satellites (
    account_id integer primary key references accounts(id) on delete cascade, mac text unique not null);
"""


def printable_name(text: str, max_length: int, what: str, allow_empty: bool = False) -> str:
    """A name as people see it: printable characters only (no tabs, line or paragraph
    separators, zero-width or other invisible characters), trimmed, at most `max_length`."""
    name = (text or "").strip()
    if not (allow_empty or name) or len(name) > max_length or not name.isprintable():
        raise AccountError(f"{what} is {'up to' if allow_empty else '1 to'} {max_length} printable characters")
    return name


class AccountStore:
    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self.set_aside: str | None = None  # where a damaged database was moved, if it was
        db = self._open()
        if db is None:
            self.set_aside = self._set_aside()
            LOG.error(
                "the accounts database was damaged: kept it as %s and started with no accounts; "
                "the router needs its setup code to be claimed again",
                self.set_aside,
            )
            db = self._open()
            if db is None:
                raise RuntimeError(f"cannot create a working accounts database at {path}")
        self._db: sqlite3.Connection = db

    def _open(self) -> sqlite3.Connection | None:
        """A checked connection, or None if the file is not a sound SQLite database."""
        if self.path != ":memory:":
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
            os.close(fd)
            os.chmod(self.path, 0o600)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            if db.execute("pragma quick_check").fetchone()[0] != "ok":
                db.close()
                return None
            db.row_factory = sqlite3.Row
            db.execute("pragma journal_mode=wal")
            db.execute("pragma synchronous=full")
            db.execute("pragma foreign_keys=on")
            db.executescript(SCHEMA)
        except sqlite3.DatabaseError:
            db.close()
            return None
        return db

    def _set_aside(self) -> str:
        kept = f"{self.path}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.replace(self.path + suffix, kept + suffix)
        return kept

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: its checks and changes are atomic, also against other processes."""
        with self._lock:
            self._db.execute("begin immediate")
            try:
                yield self._db
                self._db.execute("commit")
            except BaseException:
                self._db.execute("rollback")
                raise

    def _tx(self, sql: str, args=()) -> list[sqlite3.Row]:
        with self._transaction() as db:
            return db.execute(sql, args).fetchall()

    def _read(self, sql: str, args=()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # accounts

    def needs_setup(self) -> bool:
        return not self._read("select 1 from accounts where role = 'owner' limit 1")

    @staticmethod
    def _checked(username: str, password: str | None, role: str) -> tuple[str, str | None]:
        """The name to store and the password hash, or AccountError; hashing happens here,
        before any transaction, so the slow part holds no lock."""
        if role not in ROLES:
            raise AccountError(f"role must be one of {', '.join(ROLES)}")
        username = printable_name(username, 40, "a user name")
        if role in PAIRED:
            return username, None
        if password is None or len(password) < MIN_PASSWORD:
            raise AccountError(f"a password needs at least {MIN_PASSWORD} characters")
        return username, hash_password(password)

    @staticmethod
    def _insert(db: sqlite3.Connection, username: str, role: str, pw_hash: str | None) -> dict:
        try:
            row = db.execute(
                "insert into accounts (username, role, pw_hash, created) values (?, ?, ?, ?) " "returning id",
                (username, role, pw_hash, time.time()),
            ).fetchone()
        except sqlite3.IntegrityError:
            raise AccountError(f"there is already an account called {username!r}") from None
        return {"id": row["id"], "username": username, "role": role}

    def create_account(self, username: str, password: str | None, role: str) -> dict:
        username, pw_hash = self._checked(username, password, role)
        with self._transaction() as db:
            return self._insert(db, username, role, pw_hash)

    def create_first_owner(self, username: str, password: str) -> dict:
        """Only while no owner exists: the check and the insert are one transaction, so two
        browsers racing through the first-run page cannot both become owner."""
        username, pw_hash = self._checked(username, password, "owner")
        with self._transaction() as db:
            if db.execute("select 1 from accounts where role = 'owner'").fetchone():
                raise AlreadyOwnedError("this router already has an owner")
            return self._insert(db, username, "owner", pw_hash)

    def authenticate(self, username: str, password: str) -> dict | None:
        rows = self._read(
            "select id, username, role, pw_hash from accounts where username = ? and role not in (?, ?)",
            ((username or "").strip(), *PAIRED),
        )
        if not verify_password(password or "", rows[0]["pw_hash"] if rows else None):
            return None
        return {"id": rows[0]["id"], "username": rows[0]["username"], "role": rows[0]["role"]}

    def set_password(self, account_id: int, password: str) -> None:
        if len(password or "") < MIN_PASSWORD:
            raise AccountError(f"a password needs at least {MIN_PASSWORD} characters")
        pw_hash = hash_password(password)
        with self._transaction() as db:
            db.execute(
                "update accounts set pw_hash = ? where id = ? and role not in (?, ?)", (pw_hash, account_id, *PAIRED)
            )
            # A new password signs every other browser out.
            db.execute("delete from sessions where account_id = ?", (account_id,))

    def list_accounts(self) -> list[dict]:
        return [dict(r) for r in self._read("select id, username, role, created from accounts order by id")]

    def get_account(self, account_id: int) -> dict | None:
        rows = self._read("select id, username, role from accounts where id = ?", (account_id,))
        return dict(rows[0]) if rows else None

    def delete_account(self, account_id: int) -> None:
        """The last-owner check and the delete are one transaction: two owners removing each
        other at once leave one owner, never none."""
        with self._transaction() as db:
            account = db.execute("select role from accounts where id = ?", (account_id,)).fetchone()
            if account is None:
                raise KeyError(account_id)
            if (
                account["role"] == "owner"
                and db.execute("select count(*) from accounts where role = 'owner'").fetchone()[0] == 1
            ):
                raise AccountError("the last owner cannot be removed")
            db.execute("delete from accounts where id = ?", (account_id,))

    # sessions

    def create_session(self, account: dict, client: str = "") -> tuple[str, str]:
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = time.time()
        with self._transaction() as db:
            db.execute("delete from sessions where expires < ?", (now,))
            db.execute(
                "insert into sessions (id_hash, account_id, csrf, created, expires, client) "
                "values (?, ?, ?, ?, ?, ?)",
                (_token_hash(sid), account["id"], csrf, now, now + SESSION_TTL[account["role"]], client),
            )
        return sid, csrf

    def session(self, sid: str | None) -> dict | None:
        if not sid:
            return None
        rows = self._read(
            "select a.id, a.username, a.role, s.csrf from sessions s join accounts a "
            "on a.id = s.account_id where s.id_hash = ? and s.expires > ?",
            (_token_hash(sid), time.time()),
        )
        return dict(rows[0]) if rows else None

    def end_session(self, sid: str) -> None:
        self._tx("delete from sessions where id_hash = ?", (_token_hash(sid),))

    # kiosk pairing

    def create_pairing_code(self, owner_id: int) -> tuple[str, float]:
        return self._new_code(PANEL_CODES, owner_id)

    def _new_code(self, table: str, owner_id: int) -> tuple[str, float]:
        """A one-time code in `table` (a wall panel's or a satellite's: neither pairs the other). 8 characters
        people can type on a wall panel; with 10 minutes' life and the rate limit, not guessable."""
        code = random_code(8)
        now = time.time()
        with self._transaction() as db:
            db.execute(f"delete from {table} where expires < ?", (now,))
            db.execute(
                f"insert into {table} (code_hash, expires, created_by) values (?, ?, ?)",
                (_token_hash(code), now + PAIRING_TTL, owner_id),
            )
        return code, now + PAIRING_TTL

    @staticmethod
    def _spend_code(db: sqlite3.Connection, table: str, code: str) -> bool:
        """The code, if it is in `table` and has not expired, spent (it pairs once)."""
        spent = db.execute(
            f"delete from {table} where code_hash = ? and expires > ? returning created_by",
            (_token_hash(normalise_code(code or "")), time.time()),
        ).fetchone()
        return spent is not None

    def redeem_pairing_code(self, code: str, kiosk_name: str) -> dict | None:
        """The kiosk account for a valid code (spent), None for a wrong or expired one. A bad
        name is refused before the code is looked at, so it does not cost the code."""
        name = printable_name((kiosk_name or "").strip() or "Wall panel", 32, "a panel name")
        with self._transaction() as db:
            if not self._spend_code(db, PANEL_CODES, code):
                return None
            return self._insert(db, self._unique_name(db, name), "kiosk", None)

    @staticmethod
    def _unique_name(db: sqlite3.Connection, name: str) -> str:
        taken = {r["username"] for r in db.execute("select username from accounts")}
        # "Hall", "Hall 2", "Hall 3"…: the first free one (at most len(taken) + 1 tries).
        return next(
            candidate for n in itertools.count(1) if (candidate := name if n == 1 else f"{name} {n}") not in taken
        )

    # satellite access points: paired with a code the owner made, bound to the device they paired from

    def create_satellite_code(self, owner_id: int) -> tuple[str, float]:
        """A code for one satellite access point, as a wall panel's (8 characters, 10 minutes, rate-limited)."""
        return self._new_code(SATELLITE_CODES, owner_id)

    def redeem_satellite_code(self, code: str, name: str, mac: str) -> dict | None:
        """The satellite account for a valid code (spent), bound to the device `mac` it paired from; None for a
        wrong or expired code. A bad name is refused before the code is looked at (it does not cost the code).
        The same device paired again (its agent started afresh) replaces its earlier account, whose sessions end."""
        name = printable_name((name or "").strip() or "Access point", 32, "an access point's name")
        with self._transaction() as db:
            if not self._spend_code(db, SATELLITE_CODES, code):
                return None
            db.execute("delete from accounts where id in (select account_id from satellites where mac = ?)", (mac,))
            account = self._insert(db, self._unique_name(db, name), "satellite", None)
            db.execute("insert into satellites (account_id, mac) values (?, ?)", (account["id"], mac))
            return {**account, "mac": mac}

    def satellites(self) -> list[dict]:
        return [
            dict(r)
            for r in self._read(
                "select a.id, a.username as name, s.mac, a.created from satellites s "
                "join accounts a on a.id = s.account_id order by a.id"
            )
        ]

    def satellite_mac(self, account_id: int) -> str | None:
        """The MAC of the device a satellite account is bound to (None: no such satellite)."""
        rows = self._read("select mac from satellites where account_id = ?", (account_id,))
        return rows[0]["mac"] if rows else None

    def remove_satellite(self, account_id: int) -> None:
        """The satellite's account, its sessions with it (at once: each request reads its session row)."""
        with self._transaction() as db:
            if db.execute("select 1 from satellites where account_id = ?", (account_id,)).fetchone() is None:
                raise KeyError(account_id)
            db.execute("delete from accounts where id = ?", (account_id,))

    # device ownership (what a member may rename)

    def claim_device(self, mac: str, account_id: int, force: bool = False) -> None:
        verb = "insert or replace" if force else "insert or ignore"
        self._tx(f"{verb} into device_owners (mac, account_id) values (?, ?)", (mac, account_id))

    def follow_device(self, mac: str, earlier: Sequence[str]) -> int | None:
        """A device the router knows under a new MAC (it joined with its own passphrase) keeps the owner
        of the latest of its earlier MACs that has one, moved to its MAC now; that owner, or None."""
        with self._transaction() as db:
            owned = db.execute("select account_id from device_owners where mac = ?", (mac,)).fetchone()
            if owned is not None:
                return owned["account_id"]
            for old in reversed(earlier):
                row = db.execute("select account_id from device_owners where mac = ?", (old,)).fetchone()
                if row is not None:
                    db.execute("update device_owners set mac = ? where mac = ?", (mac, old))
                    return row["account_id"]
        return None

    def with_owners(self, devices: list[dict]) -> list[dict]:
        """Each device with its owner's account (`owner_id`). A device the router knows under a new MAC
        (it joined with its own passphrase: `earlier_macs`) keeps the owner it had, moved to its MAC now."""
        owners = self.device_owners()
        for d in devices:
            owner = owners.get(d["mac"])
            if owner is None and any(m in owners for m in d.get("earlier_macs", ())):
                # Moved on the disk in a transaction of its own; one that nobody owned before costs no write.
                owner = self.follow_device(d["mac"], d["earlier_macs"])
            d["owner_id"] = owner
        return devices

    def device_owners(self) -> dict[str, int]:
        return {r["mac"]: r["account_id"] for r in self._read("select mac, account_id from device_owners")}
