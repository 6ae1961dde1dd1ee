"""Devices' own Wi-Fi passphrases, the concern: which device has one, kept in the controller's
SQLite file (`wifi_keys` makes them and renders hostapd's key file, which the I/O edge writes)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from ..errors import ApiError, NotConfigured, UnknownDevice
from ..model import Device, State
from ..policy import wifi_keys
from ..store import DeviceStore, StoreError

LOG = logging.getLogger(__name__)


class Passphrases:
    def __init__(
        self,
        store: DeviceStore,
        clock: Callable[[], float],
        counters: dict[str, int],
        ssid: str = "",
        new_passphrase: Callable[[], str] = wifi_keys.new_passphrase,
    ):
        self.store, self.clock, self.counters = store, clock, counters
        self.ssid, self.new_passphrase = ssid, new_passphrase
        self._keys: dict[str, wifi_keys.WifiKey] = store.load_wifi_keys()
        # A moved device's earlier key ids -> its MAC now: hostapd names the key as its file last said,
        # until it has read the file written after the move (or for good, if that write failed).
        self._earlier_keyids: dict[str, str] = {}

    def network_named(self, ssid: str) -> None:
        """The Wi-Fi network's name as hostapd serves it (read at each attach): the QR codes name it."""
        self.ssid = ssid

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return mac in self._keys

    def forget(self, mac: str) -> None:
        if self._keys.pop(mac, None) is not None:
            self._save(mac, None)
        self._drop_earlier_keyids(mac)

    def move(self, old_mac: str, new_mac: str) -> None:
        """The passphrase follows the device; its key id names the new MAC (hostapd's key file is
        written again: `HomeRouter` says so)."""
        key = self._keys.pop(old_mac, None)
        if key is not None:
            self._keys[new_mac] = replace(key, mac=new_mac)
            for keyid, mac in self._earlier_keyids.items():
                if mac == old_mac:
                    self._earlier_keyids[keyid] = new_mac
            self._earlier_keyids[key.keyid] = new_mac

    def status_of(self, mac: str) -> dict:
        """That it has one, and since when; never the passphrase."""
        key = self._keys.get(mac)
        return {"wifi_key": {"keyid": key.keyid, "created": key.created, "used": key.used} if key else None}

    # -- the household's requests

    def issue(self, device: Device) -> dict:
        """A new passphrase of the device's own, for a permitted device only."""
        if device.state is not State.PERMITTED:
            raise ApiError(f"{device.mac} is {device.state.value}: only a permitted device gets its own passphrase")
        mac = device.mac
        if not self.ssid:
            raise NotConfigured("this router has no Wi-Fi network configured (--wifi-ssid)")
        key = wifi_keys.WifiKey(mac, self.new_passphrase(), self.clock())
        self._keys[mac] = key
        self._drop_earlier_keyids(mac)  # the old passphrase is no longer the device's
        self._save(mac, key)
        return self.key_of(mac)

    def revoke(self, mac: str) -> dict:
        if self._keys.pop(mac, None) is None:
            raise UnknownDevice(f"{mac} has no passphrase of its own")
        self._drop_earlier_keyids(mac)
        self._save(mac, None)
        return {"mac": mac, "revoked": True}

    # -- queries

    def key_of(self, mac: str) -> dict:
        """The passphrase and its QR code (to show it again)."""
        key = self._keys.get(mac)
        if key is None:
            raise UnknownDevice(f"{mac} has no passphrase of its own")
        return {
            "mac": mac,
            "keyid": key.keyid,
            "ssid": self.ssid,
            "passphrase": key.passphrase,
            "qr": wifi_keys.qr_payload(self.ssid, key.passphrase),
            "created": key.created,
        }

    def device_with(self, keyid: str) -> str | None:
        """The MAC of the device whose own passphrase has this key id (None: the guest's, or no one's)."""
        mac = self._earlier_keyids.get(keyid) or wifi_keys.mac_of_keyid(keyid)
        return mac if mac is not None and mac in self._keys else None

    def has_own(self, mac: str) -> bool:
        return mac in self._keys

    def keyid_in_use(self, mac: str) -> str | None:
        """The key id of the device's own passphrase once the device has joined with it (None before: until
        it switches, the passphrase it was on stays its own too)."""
        key = self._keys.get(mac)
        return key.keyid if key and key.used else None

    def joined_with_own(self, mac: str) -> None:
        """hostapd: the device joined with its own passphrase; the first time, it is in use from now."""
        key = self._keys.get(mac)
        if key is not None and not key.used:
            self._keys[mac] = replace(key, used=self.clock())
            self._save(mac, self._keys[mac])

    def all(self) -> list[wifi_keys.WifiKey]:
        """Every device's passphrase, for hostapd's key file."""
        return list(self._keys.values())

    def _drop_earlier_keyids(self, mac: str) -> None:
        for keyid in [k for k, m in self._earlier_keyids.items() if m == mac]:
            del self._earlier_keyids[keyid]

    def _save(self, mac: str, key: wifi_keys.WifiKey | None) -> None:
        try:
            self.store.save_wifi_key(mac, key)
        except StoreError as exc:
            self.counters["store_errors"] += 1
            LOG.error("%s", exc)
