"""The controller's own SQLite file: device decisions, /30 reservations, DNS rules, Wi-Fi passphrases,
pauses, schedules, allowances (and today's use), the plugged-in gates' state (`concerns/gates`) and the
household's time settings.

Writes never run on the caller's thread: `save`, `save_dns_rule` and `delete` queue the
change and return at once (the router calls them under the controller's lock, where nothing
slow may run); one writer thread commits whatever has queued up in one transaction. Commits
are `synchronous=FULL` (fsynced): `flush()` returns once everything queued before it is on
the disk, and the ws.v1 API answers a decision only after that, so an acknowledged decision
survives a power cut. A crash leaves either the old record or the new one, never half.

After each commit the writer refreshes a copy (`PATH.backup`, SQLite's backup API). A file
that is not a readable database is moved aside (never deleted) and the copy restored, so
a corrupt file does not silently lift the household's blacklist; only if the copy is
unreadable too does the controller start empty, and says so (`recovered`).
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Mapping

from .model import Device, State
from .policy.wifi_keys import WifiKey
from .wire.lan import Subnet

LOG = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    mac TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    subnet INTEGER UNIQUE,
    hostname TEXT NOT NULL DEFAULT '',
    vendor_class TEXT NOT NULL DEFAULT '',
    name TEXT NOT NULL DEFAULT '',
    first_seen REAL NOT NULL DEFAULT 0,
    last_seen REAL NOT NULL DEFAULT 0,
    lease_expires REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS dns_rules (
    mac TEXT NOT NULL,
    domain TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('deny', 'allow')),
    PRIMARY KEY (mac, domain)
);
CREATE TABLE IF NOT EXISTS wifi_keys (
    mac TEXT PRIMARY KEY,
    passphrase TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS wifi_key_uses (
    mac TEXT PRIMARY KEY,
    first REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS pauses (
    mac TEXT PRIMARY KEY,
    paused INTEGER NOT NULL,
    until REAL,
    excused_until REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS schedules (
    mac TEXT PRIMARY KEY,
    windows TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS allowances (
    mac TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('minutes', 'bytes')),
    amount INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS allowance_usage (
    mac TEXT PRIMARY KEY,
    day_start REAL NOT NULL,
    bytes INTEGER NOT NULL,
    minutes INTEGER NOT NULL,
    bonus INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS shared_allowances (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('minutes', 'bytes')),
    amount INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS shared_allowance_usage (
    name TEXT PRIMARY KEY,
    day_start REAL NOT NULL,
    bytes INTEGER NOT NULL,
    minutes INTEGER NOT NULL,
    bonus INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS allowance_sharing (
    mac TEXT PRIMARY KEY,
    name TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS fingerprints (
    mac TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    client_id TEXT NOT NULL,
    parameter_list TEXT NOT NULL,
    vendor_class TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS route_owners (
    prefix TEXT PRIMARY KEY,
    mac TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS gate_state (
    mac TEXT NOT NULL,
    gate TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (mac, gate)
);
CREATE TABLE IF NOT EXISTS earlier_macs (
    mac TEXT NOT NULL,
    earlier TEXT NOT NULL,
    PRIMARY KEY (mac, earlier)
);
"""


# The tables with a row per device, by its MAC (moved or deleted with it).
DEVICE_TABLES = (
    "devices",
    "dns_rules",
    "wifi_keys",
    "wifi_key_uses",
    "pauses",
    "schedules",
    "allowances",
    "allowance_usage",
    "allowance_sharing",
    "gate_state",
    "earlier_macs",
)

# A device's own allowance and its use are keyed by its MAC; a shared allowance's by its name.
ALLOWANCE_TABLES = {
    False: ("allowances", "allowance_usage", "mac"),
    True: ("shared_allowances", "shared_allowance_usage", "name"),
}


class StoreError(RuntimeError):
    pass


def _open(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        result = db.execute("PRAGMA quick_check").fetchone()[0]
        if result != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {result}")
        db.executescript(SCHEMA)
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


class DeviceStore:
    def __init__(self, path: str):
        self.path, self.backup_path = path, f"{path}.backup"
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.quarantined: str | None = None
        self.recovered = ""  # what happened at start, if the file was unreadable
        self.db = self._open_or_recover()
        os.chmod(path, 0o600)  # it holds Wi-Fi passphrases (SQLite gives its -wal and -shm the same mode)
        self.errors = 0
        self._queue: list[tuple] = []
        self._queued = self._written = 0
        self._closing = False
        self._changed = threading.Condition()
        self._writer = threading.Thread(target=self._write_batches, name="store-writer", daemon=True)
        self._writer.start()

    def _open_or_recover(self) -> sqlite3.Connection:
        try:
            return _open(self.path)
        except sqlite3.DatabaseError as exc:
            self.quarantined = f"{self.path}.corrupt-{int(time.time())}"
            os.replace(self.path, self.quarantined)
            for suffix in ("-wal", "-shm"):
                if os.path.exists(self.path + suffix):
                    os.replace(self.path + suffix, self.quarantined + suffix)
            try:
                _open(self.backup_path).close()
                shutil.copyfile(self.backup_path, self.path)
                self.recovered = (
                    f"the device database was unreadable ({exc}); kept it as {self.quarantined} "
                    "and restored the last copy: the household's decisions stand"
                )
            except (OSError, sqlite3.DatabaseError) as backup_exc:
                self.recovered = (
                    f"the device database was unreadable ({exc}) and so was its copy ({backup_exc}); "
                    f"kept it as {self.quarantined} and started with no decisions: every device "
                    "must be admitted again"
                )
            LOG.error("%s", self.recovered)
            return _open(self.path)

    # -- reading (at start, before the writer runs)

    def load(self) -> dict[str, Device]:
        devices = {}
        rows = self.db.execute(
            "SELECT mac, state, subnet, hostname, vendor_class, name, first_seen, last_seen, lease_expires "
            "FROM devices"
        )
        for mac, state, subnet, hostname, vendor_class, name, first, last, expires in rows:
            try:
                devices[mac] = Device(
                    mac=mac,
                    state=State(state),
                    subnet=Subnet(subnet) if subnet is not None else None,
                    hostname=hostname,
                    vendor_class=vendor_class,
                    name=name,
                    first_seen=first,
                    last_seen=last,
                    lease_expires=expires,
                )
            except ValueError as exc:
                LOG.error("skipping unreadable device record %s: %s", mac, exc)
        return devices

    def load_dns_rules(self) -> dict[str, dict[str, str]]:
        rules: dict[str, dict[str, str]] = {}
        for mac, domain, action in self.db.execute("SELECT mac, domain, action FROM dns_rules"):
            rules.setdefault(mac, {})[domain] = action
        return rules

    def load_wifi_keys(self) -> dict[str, WifiKey]:
        rows = self.db.execute(
            "SELECT k.mac, k.passphrase, k.created, COALESCE(u.first, 0) FROM wifi_keys k "
            "LEFT JOIN wifi_key_uses u ON u.mac = k.mac"
        )
        return {mac: WifiKey(mac, passphrase, created, used) for mac, passphrase, created, used in rows}

    def load_pauses(self) -> dict[str, tuple[bool, float | None, float]]:
        """mac -> (paused, until when (None: until resumed), excused from its schedule until when)."""
        rows = self.db.execute("SELECT mac, paused, until, excused_until FROM pauses")
        return {mac: (bool(paused), until, excused) for mac, paused, until, excused in rows}

    def load_schedules(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT mac, windows FROM schedules"))

    def load_allowances(self, shared: bool = False) -> dict[str, tuple[str, int]]:
        """Each device's own allowance by its MAC (shared: each shared allowance by its name)."""
        table, _, key = ALLOWANCE_TABLES[shared]
        return {
            holder: (kind, amount)
            for holder, kind, amount in self.db.execute(f"SELECT {key}, kind, amount FROM {table}")
        }

    def load_usage(self, shared: bool = False) -> dict[str, tuple[float, int, int, int]]:
        _, table, key = ALLOWANCE_TABLES[shared]
        rows = self.db.execute(f"SELECT {key}, day_start, bytes, minutes, bonus FROM {table}")
        return {holder: (day_start, nbytes, minutes, bonus) for holder, day_start, nbytes, minutes, bonus in rows}

    def load_allowance_sharing(self) -> dict[str, str]:
        """mac -> the shared allowance the device counts against."""
        return dict(self.db.execute("SELECT mac, name FROM allowance_sharing"))

    def load_settings(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT key, value FROM settings"))

    def load_fingerprints(self) -> dict[str, tuple[str, str, str, str]]:
        """mac -> the DHCP client that took a permitted device's lease (host name, client identifier,
        requested options, vendor class)."""
        rows = self.db.execute("SELECT mac, hostname, client_id, parameter_list, vendor_class FROM fingerprints")
        return {mac: tuple(fields) for mac, *fields in rows}

    def load_route_owners(self) -> dict[str, str]:
        """An advertised route's prefix -> the device whose it is."""
        return dict(self.db.execute("SELECT prefix, mac FROM route_owners"))

    def load_gate_state(self, gate: str) -> dict[str, str]:
        """A plugged-in gate's value for each device it holds one for (`concerns/gates`)."""
        return dict(self.db.execute("SELECT mac, value FROM gate_state WHERE gate = ?", (gate,)).fetchall())

    def load_earlier_macs(self) -> dict[str, tuple[str, ...]]:
        """Each device's MACs before its present one (it came back with its own passphrase), oldest first."""
        earlier: dict[str, tuple[str, ...]] = {}
        for mac, old in self.db.execute("SELECT mac, earlier FROM earlier_macs ORDER BY rowid"):
            earlier[mac] = (*earlier.get(mac, ()), old)
        return earlier

    # -- writing: queued, committed by the writer thread

    def save(self, device: Device) -> None:
        self._submit(
            "INSERT INTO devices (mac, state, subnet, hostname, vendor_class, name, first_seen, "
            "last_seen, lease_expires) VALUES (?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT(mac) DO UPDATE SET state=excluded.state, subnet=excluded.subnet, "
            "hostname=excluded.hostname, vendor_class=excluded.vendor_class, name=excluded.name, "
            "first_seen=excluded.first_seen, last_seen=excluded.last_seen, "
            "lease_expires=excluded.lease_expires",
            (
                device.mac,
                device.state.value,
                device.subnet.index if device.subnet else None,
                device.hostname,
                device.vendor_class,
                device.name,
                device.first_seen,
                device.last_seen,
                device.lease_expires,
            ),
        )

    def save_dns_rule(self, mac: str, domain: str, action: str | None) -> None:
        """Set (or, with action None, remove) one device's rule for one domain."""
        self._set_row("dns_rules", {"mac": mac, "domain": domain}, None if action is None else {"action": action})

    def save_wifi_key(self, mac: str, key: WifiKey | None) -> None:
        """Set (or, with None, revoke) a device's own Wi-Fi passphrase, and when it was first used."""
        statements: list[tuple[str, tuple]] = [("DELETE FROM wifi_key_uses WHERE mac = ?", (mac,))]
        if key is None:
            statements.append(("DELETE FROM wifi_keys WHERE mac = ?", (mac,)))
        else:
            statements.append(
                (
                    "INSERT INTO wifi_keys (mac, passphrase, created) VALUES (?,?,?) ON CONFLICT(mac) "
                    "DO UPDATE SET passphrase=excluded.passphrase, created=excluded.created",
                    (mac, key.passphrase, key.created),
                )
            )
            if key.used:
                statements.append(("INSERT INTO wifi_key_uses (mac, first) VALUES (?,?)", (mac, key.used)))
        self._submit_together(statements)

    def save_pause(self, mac: str, paused: bool, until: float | None, excused_until: float) -> None:
        pause = {"paused": int(paused), "until": until, "excused_until": excused_until}
        self._set_row("pauses", {"mac": mac}, pause if paused or excused_until else None)

    def save_schedule(self, mac: str, windows: str) -> None:
        """A device's weekly schedule in its text form (`schedules.text`); empty removes it."""
        self._set_row("schedules", {"mac": mac}, {"windows": windows} if windows else None)

    def save_allowance(self, holder: str, kind: str | None, amount: int, shared: bool = False) -> None:
        """Set (or, with kind None, remove) a device's daily allowance (shared: a shared allowance's)."""
        table, usage, key = ALLOWANCE_TABLES[shared]
        self._set_row(table, {key: holder}, None if kind is None else {"kind": kind, "amount": amount})
        if kind is None:
            self._set_row(usage, {key: holder}, None)

    def save_usage(
        self, holder: str, day_start: float, nbytes: int, minutes: int, bonus: int, shared: bool = False
    ) -> None:
        _, table, key = ALLOWANCE_TABLES[shared]
        usage = {"day_start": day_start, "bytes": nbytes, "minutes": minutes, "bonus": bonus}
        self._set_row(table, {key: holder}, usage)

    def save_sharing(self, mac: str, name: str | None) -> None:
        """The shared allowance a device counts against (None: none)."""
        self._set_row("allowance_sharing", {"mac": mac}, None if name is None else {"name": name})

    def save_fingerprint(self, mac: str, fields: tuple[str, str, str, str] | None) -> None:
        columns = ("hostname", "client_id", "parameter_list", "vendor_class")
        self._set_row("fingerprints", {"mac": mac}, None if fields is None else dict(zip(columns, fields, strict=True)))

    def save_route_owner(self, prefix: str, mac: str | None) -> None:
        self._set_row("route_owners", {"prefix": prefix}, None if mac is None else {"mac": mac})

    def save_gate_state(self, mac: str, gate: str, value: str | None) -> None:
        """A plugged-in gate's value for the device (None removes it)."""
        self._set_row("gate_state", {"mac": mac, "gate": gate}, None if value is None else {"value": value})

    def save_setting(self, key: str, value: str) -> None:
        self._set_row("settings", {"key": key}, {"value": value})

    def _set_row(self, table: str, key: Mapping[str, object], values: Mapping[str, object] | None) -> None:
        """The row of `table` at `key` (its primary key's columns) set to `values`, or deleted (None). Table and
        column names are this module's own words, never a caller's input."""
        where = " AND ".join(f"{column} = ?" for column in key)
        if values is None:
            self._submit(f"DELETE FROM {table} WHERE {where}", tuple(key.values()))
            return
        columns = [*key, *values]
        updates = ", ".join(f"{column}=excluded.{column}" for column in values)
        self._submit(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({','.join('?' * len(columns))}) "
            f"ON CONFLICT({', '.join(key)}) DO UPDATE SET {updates}",
            (*key.values(), *values.values()),
        )

    def move(self, old_mac: str, new_mac: str) -> None:
        """Every row of a device under its new MAC (a device that returned with another address); rows
        already under the new MAC (a newcomer it was taken for) go first."""
        self._submit_together(
            [(f"DELETE FROM {table} WHERE mac = ?", (new_mac,)) for table in DEVICE_TABLES]
            + [(f"UPDATE {table} SET mac = ? WHERE mac = ?", (new_mac, old_mac)) for table in DEVICE_TABLES]
            + [
                ("DELETE FROM earlier_macs WHERE mac = ? AND earlier = ?", (new_mac, new_mac)),  # back to one it had
                ("INSERT OR IGNORE INTO earlier_macs (mac, earlier) VALUES (?, ?)", (new_mac, old_mac)),
            ]
        )

    def delete(self, mac: str) -> None:
        self._submit_together([(f"DELETE FROM {table} WHERE mac = ?", (mac,)) for table in DEVICE_TABLES])

    def _submit(self, sql: str, args: tuple) -> None:
        self._submit_together([(sql, args)])

    def _submit_together(self, statements: list[tuple[str, tuple]]) -> None:
        """Queued at once, so the writer commits them in one transaction (all or none after a power cut)."""
        with self._changed:
            if self._closing:
                raise StoreError("the store is closed")
            self._queue.extend(statements)
            self._queued += len(statements)
            self._changed.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is on the disk (or failed, counted in `errors`)."""
        with self._changed:
            target = self._queued
            return self._changed.wait_for(lambda: self._written >= target, timeout)

    def close(self) -> None:
        self.flush()
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._writer.join(timeout=10)
        self.db.close()

    def _write_batches(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._closing)
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            try:
                self.db.execute("BEGIN IMMEDIATE")
                for sql, args in batch:
                    self.db.execute(sql, args)
                self.db.execute("COMMIT")
                self._refresh_backup()
            except (sqlite3.Error, OSError) as exc:
                # e.g. a full disk: the router keeps serving from memory; the batch is lost, and said so.
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                self.errors += 1
                LOG.error("could not write %d change(s) to %s: %s", len(batch), self.path, exc)
            with self._changed:
                self._written += len(batch)
                self._changed.notify_all()

    def _refresh_backup(self) -> None:
        tmp = self.backup_path + ".tmp"
        copy = sqlite3.connect(tmp)
        os.chmod(tmp, 0o600)
        try:
            self.db.backup(copy)
        finally:
            copy.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.backup_path)  # the copy is always whole: the old one or the new one
