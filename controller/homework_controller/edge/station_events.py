"""What the os-ken app hears from hostapd and tells it, beside the switch: which passphrase each
station joined with (`AP-STA-CONNECTED ... keyid=`), the network's name hostapd serves, and the key
file of devices' own passphrases it reads. A mixin of `ofapp.HomeworkController`, as `periodic.py`:
what it needs of the app is declared below.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..api.server import TimedLock
from ..config import CONFIG
from ..core.router import HomeRouter
from ..effects import Effect
from ..model import BadMac
from ..radio import hostapd_ctrl

LOG = logging.getLogger("homework.controller")


class StationEvents:
    router: HomeRouter
    lock: TimedLock
    _apply: Callable[[list[Effect]], None]

    def start_station_events(self) -> hostapd_ctrl.Authenticator:
        """The authenticator (what hostapd is told of devices, and the key file, written now as the
        database has it: after a restore too), and with a key file, hostapd's event stream."""
        authenticator = hostapd_ctrl.Authenticator(CONFIG.hostapd_ctrl, CONFIG.wifi_psk_file, self._wifi_keys)
        for job in (authenticator.run_forever, authenticator.publish_keys):
            threading.Thread(target=job, daemon=True).start()
        if CONFIG.hostapd_ctrl and CONFIG.wifi_psk_file:
            # Which passphrase each station joined with: only a radio with the key file says (keyid=).
            events = hostapd_ctrl.Events(CONFIG.hostapd_ctrl, self._on_hostapd_event, on_attach=self._on_attach)
            threading.Thread(target=events.run_forever, daemon=True).start()
        return authenticator

    def _on_hostapd_event(self, event: str) -> None:
        joined = hostapd_ctrl.station_joined(event)  # parsed off the lock
        if joined is None:
            return
        mac, keyid = joined
        if not keyid and CONFIG.hostapd_conf:
            try:
                over_sae = hostapd_ctrl.joined_over_sae(hostapd_ctrl.command(CONFIG.hostapd_ctrl, "sta", mac))
            except hostapd_ctrl.HostapdError as exc:
                LOG.warning("how %s joined: %s", mac, exc)
                over_sae = False
            keyid = self._sae_keyid(mac) if over_sae else ""
        self._station_joined(mac, keyid, event)

    def _station_joined(self, mac: str, keyid: str, source: str) -> None:
        with self.lock:
            try:
                self._apply(self.router.joining.station_joined(mac, keyid))
            except BadMac:
                LOG.warning("hostapd named no station address: %r", source)

    def _sae_keyid(self, mac: str) -> str:
        """The device key a station that joined over SAE proved (hostapd names none), off the lock."""
        try:
            with open(CONFIG.hostapd_conf) as f:
                conf = f.read()
        except OSError as exc:
            LOG.warning("which key %s joined with: %s", mac, exc)
            return ""
        keyid = hostapd_ctrl.sae_keyid(conf, mac, self._wifi_keys())
        if keyid:
            LOG.info("%s joined over SAE with its own password (%s)", mac, keyid)
        return keyid

    def _on_attach(self) -> None:
        """hostapd (re)started, or the controller did: the network's name, and the stations already on
        the air, judged as if they had just joined (their joins were not heard)."""
        self._learn_ssid()
        try:
            present = hostapd_ctrl.stations_present(hostapd_ctrl.command(CONFIG.hostapd_ctrl, "all_sta"))
        except hostapd_ctrl.HostapdError as exc:
            LOG.warning("the stations on the air: %s", exc)
            return
        for mac, keyid, over_sae in present:
            if not keyid and over_sae and CONFIG.hostapd_conf:
                keyid = self._sae_keyid(mac)
            self._station_joined(mac, keyid, "ALL_STA")

    def _learn_ssid(self) -> None:
        """The network's name as hostapd serves it, for passphrases' QR codes (read at each attach: the
        household renaming it restarts hostapd), unless --wifi-ssid names it."""
        if CONFIG.wifi_ssid:
            return
        try:
            ssid = hostapd_ctrl.served_ssid(CONFIG.hostapd_ctrl)
        except hostapd_ctrl.HostapdError as exc:
            LOG.warning("the network's name: %s", exc)
            return
        with self.lock:
            self.router.passphrases.network_named(ssid)

    def _wifi_keys(self) -> list:
        """Every device's own passphrase, for hostapd's key file."""
        with self.lock:
            return self.router.passphrases.all()
