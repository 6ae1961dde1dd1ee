"""The controller's own SQLite file: device decisions and /30 reservations.

Every change is one transaction (WAL journal), so a crash or power cut leaves
either the old record or the new one, never half of each. synchronous=NORMAL
keeps commits off the fsync path (a DHCP storm must not wait on the disk):
a power cut may roll back the last second of changes, never corrupt them.
A file that is not a readable database is moved aside, never deleted.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import time

from .model import Device, State, Subnet

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
"""


class StoreError(RuntimeError):
    pass


class DeviceStore:
    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            self.db = self._open()
        except sqlite3.DatabaseError as exc:
            quarantined = f"{path}.corrupt-{int(time.time())}"
            os.replace(path, quarantined)
            LOG.error("device database %s is unreadable (%s); kept it as %s and started empty",
                      path, exc, quarantined)
            self.quarantined: str | None = quarantined
            self.db = self._open()
        else:
            self.quarantined = None

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            result = db.execute("PRAGMA quick_check").fetchone()[0]
            if result != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {result}")
            db.executescript(SCHEMA)
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def load(self) -> dict[str, Device]:
        devices = {}
        rows = self.db.execute(
            "SELECT mac, state, subnet, hostname, vendor_class, name, first_seen, last_seen, lease_expires "
            "FROM devices")
        for mac, state, subnet, hostname, vendor_class, name, first, last, expires in rows:
            try:
                devices[mac] = Device(mac=mac, state=State(state),
                                      subnet=Subnet(subnet) if subnet is not None else None,
                                      hostname=hostname, vendor_class=vendor_class, name=name,
                                      first_seen=first, last_seen=last, lease_expires=expires)
            except ValueError as exc:
                LOG.error("skipping unreadable device record %s: %s", mac, exc)
        return devices

    def save(self, device: Device) -> None:
        try:
            self.db.execute(
                "INSERT INTO devices (mac, state, subnet, hostname, vendor_class, name, first_seen, "
                "last_seen, lease_expires) VALUES (?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT(mac) DO UPDATE SET state=excluded.state, subnet=excluded.subnet, "
                "hostname=excluded.hostname, vendor_class=excluded.vendor_class, name=excluded.name, "
                "first_seen=excluded.first_seen, last_seen=excluded.last_seen, "
                "lease_expires=excluded.lease_expires",
                (device.mac, device.state.value, device.subnet.index if device.subnet else None,
                 device.hostname, device.vendor_class, device.name, device.first_seen,
                 device.last_seen, device.lease_expires))
        except sqlite3.Error as exc:  # e.g. disk full: the caller keeps serving from memory
            raise StoreError(f"could not save {device.mac}: {exc}") from exc

    def load_dns_rules(self) -> dict[str, dict[str, str]]:
        rules: dict[str, dict[str, str]] = {}
        for mac, domain, action in self.db.execute("SELECT mac, domain, action FROM dns_rules"):
            rules.setdefault(mac, {})[domain] = action
        return rules

    def save_dns_rule(self, mac: str, domain: str, action: str | None) -> None:
        """Set (or, with action None, remove) one device's rule for one domain."""
        try:
            if action is None:
                self.db.execute("DELETE FROM dns_rules WHERE mac = ? AND domain = ?", (mac, domain))
            else:
                self.db.execute("INSERT INTO dns_rules (mac, domain, action) VALUES (?,?,?) "
                                "ON CONFLICT(mac, domain) DO UPDATE SET action=excluded.action",
                                (mac, domain, action))
        except sqlite3.Error as exc:
            raise StoreError(f"could not save the DNS rule {domain} for {mac}: {exc}") from exc

    def delete(self, mac: str) -> None:
        try:
            self.db.execute("DELETE FROM devices WHERE mac = ?", (mac,))
            self.db.execute("DELETE FROM dns_rules WHERE mac = ?", (mac,))
        except sqlite3.Error as exc:
            raise StoreError(f"could not forget {mac}: {exc}") from exc

    def close(self) -> None:
        self.db.close()
