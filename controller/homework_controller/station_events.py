"""What the os-ken app hears from hostapd and tells it, beside the switch: which passphrase each
station joined with (`AP-STA-CONNECTED ... keyid=`), the network's name hostapd serves, and the key
file of devices' own passphrases it reads. A mixin of `ofapp.HomeworkController`, as `periodic.py`:
what it needs of the app is declared below.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from . import hostapd_ctrl
from .config import CONFIG
from .model import BadMac
from .router import HomeRouter
from .serving import TimedLock

LOG = logging.getLogger("homework.controller")


class StationEvents:
    router: HomeRouter
    lock: TimedLock
    _apply: Callable[[list], None]

    def start_station_events(self) -> hostapd_ctrl.Authenticator:
        """The authenticator (what hostapd is told of devices, and the key file, written now as the
        database has it: after a restore too), and with a key file, hostapd's event stream."""
        authenticator = hostapd_ctrl.Authenticator(CONFIG.hostapd_ctrl, CONFIG.wifi_psk_file, self._wifi_keys)
        for job in (authenticator.run_forever, authenticator.publish_keys):
            threading.Thread(target=job, daemon=True).start()
        if CONFIG.hostapd_ctrl and CONFIG.wifi_psk_file:
            # Which passphrase each station joined with: only a radio with the key file says (keyid=).
            events = hostapd_ctrl.Events(CONFIG.hostapd_ctrl, self._on_hostapd_event, on_attach=self._learn_ssid)
            threading.Thread(target=events.run_forever, daemon=True).start()
        return authenticator

    def _on_hostapd_event(self, event: str) -> None:
        joined = hostapd_ctrl.station_joined(event)  # parsed off the lock
        if joined is None:
            return
        with self.lock:
            try:
                self._apply(self.router.station_joined(*joined))
            except BadMac:
                LOG.warning("hostapd event with no station address: %r", event)

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
            self.router.network_named(ssid)

    def _wifi_keys(self) -> list:
        """Every device's own passphrase, for hostapd's key file."""
        with self.lock:
            return self.router.passphrases.all()
