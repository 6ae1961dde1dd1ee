"""What the controller hears from hostapd and tells it, beside the switch: which station joined the router's
radio with which passphrase (`AP-STA-CONNECTED ... keyid=`, or a handshake of one back from a roam hostapd did
not see) and which left it, at the radio's access port; the network's name hostapd serves; and the key file of
devices' own passphrases it reads (`authenticator`: what hostapd is told).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ...api.server import TimedLock
from ...config import Config
from ...core.router import HomeRouter
from ...effects import Effect
from ...model import BadMac
from ...radio import hostapd_ctrl
from .switch_connection import SwitchConnection

LOG = logging.getLogger("homework.controller")


def authenticator(router: HomeRouter, lock: TimedLock, config: Config) -> hostapd_ctrl.Authenticator:
    """What hostapd is told of devices, and its key file of devices' own passphrases (read under the lock)."""

    def wifi_keys() -> list:
        with lock:
            return router.passphrases.all()

    return hostapd_ctrl.Authenticator(config.hostapd_ctrl, config.wifi_psk_file, wifi_keys)


class StationEvents:
    """apply: how the router's effects are carried out (`FairServer.apply`); switch: which access port the
    router's radio is (`SwitchConnection.radio_port`), where hostapd's stations join and leave."""

    def __init__(
        self,
        router: HomeRouter,
        lock: TimedLock,
        apply: Callable[[list[Effect]], None],
        authenticator: hostapd_ctrl.Authenticator,
        switch: SwitchConnection,
        config: Config,
    ):
        self.router, self.lock, self.apply, self.authenticator = router, lock, apply, authenticator
        self.switch, self.config = switch, config
        self.handshakes = hostapd_ctrl.Handshakes()  # hostapd's events come from one thread

    def start(self) -> None:
        """The authenticator's thread and the key file, written now as the database has it (after a restore
        too), and with a key file, hostapd's event stream."""
        for job in (self.authenticator.run_forever, self.authenticator.publish_keys):
            threading.Thread(target=job, daemon=True).start()
        if self.config.hostapd_ctrl and self.config.wifi_psk_file:
            # Which passphrase each station joined with: only a radio with the key file says (keyid=).
            events = hostapd_ctrl.Events(self.config.hostapd_ctrl, self._on_hostapd_event, on_attach=self._on_attach)
            threading.Thread(target=events.run_forever, daemon=True).start()

    def _on_hostapd_event(self, event: str) -> None:
        if not self.handshakes.heard(event):
            return  # the completion of a handshake whose AP-STA-CONNECTED was judged
        joined = hostapd_ctrl.station_joined(event)  # parsed off the lock
        if joined is None:
            left, completed = hostapd_ctrl.station_left(event), hostapd_ctrl.handshake_completed(event)
            if left is not None:
                self._station_left(left, event)
            elif completed is not None:
                self._stations_on_the_air(completed)  # back from a roam hostapd did not see
            return
        mac, keyid = joined
        if not keyid and self.config.hostapd_conf:
            try:
                over_sae = hostapd_ctrl.joined_over_sae(hostapd_ctrl.station(self.config.hostapd_ctrl, mac))
            except hostapd_ctrl.HostapdError as exc:
                LOG.warning("how %s joined: %s", mac, exc)
                over_sae = False
            keyid = self._sae_keyid(mac) if over_sae else ""
        self._station_joined(mac, keyid, event)

    def _station_joined(self, mac: str, keyid: str, source: str) -> None:
        """On the router's own radio's access port: where the station is, if it roamed here."""
        with self.lock:
            try:
                self.apply(self.router.joining.station_joined(mac, keyid, self.switch.radio_port))
            except BadMac:
                LOG.warning("hostapd named no station address: %r", source)

    def _station_left(self, mac: str, source: str) -> None:
        with self.lock:
            try:
                self.apply(self.router.joining.station_left(mac, self.switch.radio_port))
            except BadMac:
                LOG.warning("hostapd named no station address: %r", source)

    def _sae_keyid(self, mac: str) -> str:
        """The device key a station that joined over SAE proved (hostapd names none), off the lock."""
        try:
            with open(self.config.hostapd_conf) as f:
                conf = f.read()
        except OSError as exc:
            LOG.warning("which key %s joined with: %s", mac, exc)
            return ""
        keyid = hostapd_ctrl.sae_keyid(conf, mac, self.authenticator.keys())
        if keyid:
            LOG.info("%s joined over SAE with its own password (%s)", mac, keyid)
        return keyid

    def _on_attach(self) -> None:
        """hostapd (re)started, or the controller did: the network's name, and the stations already on
        the air, judged as if they had just joined (their joins were not heard)."""
        self._learn_ssid()
        present = self._stations_on_the_air(None)
        with self.lock:
            try:
                self.apply(self.router.joining.stations_at(self.switch.radio_port, {mac for mac, _, _ in present}))
            except BadMac:
                LOG.warning("hostapd named a station with no address: %r", present)

    def _stations_on_the_air(self, mac: str | None) -> list[tuple[str, str, bool]]:
        """The station `mac` (None: every station) as hostapd has it, each judged as if it had just joined."""
        ctrl, asked = self.config.hostapd_ctrl, "all_sta" if mac is None else f"sta {mac}"
        try:
            answer = hostapd_ctrl.command(ctrl, asked) if mac is None else hostapd_ctrl.station(ctrl, mac)
        except hostapd_ctrl.HostapdError as exc:
            LOG.warning("the stations on the air: %s", exc)
            return []
        present = hostapd_ctrl.stations_present(answer)
        for station, keyid, over_sae in present:
            if not keyid and over_sae and self.config.hostapd_conf:
                keyid = self._sae_keyid(station)
            self._station_joined(station, keyid, asked)
        return present

    def _learn_ssid(self) -> None:
        """The network's name as hostapd serves it, for passphrases' QR codes (read at each attach: the
        household renaming it restarts hostapd), unless --wifi-ssid names it."""
        if self.config.wifi_ssid:
            return
        try:
            ssid = hostapd_ctrl.served_ssid(self.config.hostapd_ctrl)
        except hostapd_ctrl.HostapdError as exc:
            LOG.warning("the network's name: %s", exc)
            return
        with self.lock:
            self.router.passphrases.network_named(ssid)
