"""ws.v1's calls on the router core (a mixin; `api.make_app(self.call)` serves them): the os-ken app's
(`ofapp.HomeworkController`, over the real switch) and the web UI's tests' (the same core over the
controller's fake switch), so both answer every operation by this one path. The class below declares
what it needs of its host: the router and its lock, the radio's settings file, the authenticator (which
publishes the Wi-Fi keys), whether the switch holds the rules, how effects are carried out, and the
host's own answers to the "edge" operations (health, counters: its switch, sockets and threads).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..core import satellites
from ..core.router import HomeRouter
from ..radio.hostapd_ctrl import Authenticator
from ..radio.radio_settings import RadioSettingsFile
from . import authority, operations
from .server import TimedLock

LOG = logging.getLogger("homework.controller")

# Devices whose status one hold of the lock assembles for ws.v1 `status` of every device: a storm's 256 pending
# devices took 2-5 ms of CPU at once (much longer on a loaded box), and the web UI asks for the listing on every
# batch of Leases rows, so in a lease-completing storm it held the lock 110 ms (issue 39).
STATUS_PER_HOLD = 32


class Ws1Service:
    router: HomeRouter
    lock: TimedLock
    radio_settings: RadioSettingsFile
    authenticator: Authenticator
    switch_ready: bool
    _apply: Callable[..., None]

    WIFI_KEY_CHANGES = ("wifi-key", "revoke-wifi-key")

    def _every_status(self, op: operations.Operation, role: str) -> list[dict]:
        """ws.v1 `status` of every device, `STATUS_PER_HOLD` devices per hold of the lock, so that other devices'
        DHCP and DNS are served in between: each device's status as it is when its turn comes (one forgotten
        meanwhile is left out, one new meanwhile is in the next listing), with what each role may do to it, as
        `operations.status` answers."""
        with self.lock:
            authority.check(self.router, role, op, [])
            macs = sorted(self.router.devices)
        statuses: list[dict] = []
        for at in range(0, len(macs), STATUS_PER_HOLD):
            with self.lock:
                statuses += [
                    operations.with_may(self.router, s) for s in self.router.statuses(macs[at : at + STATUS_PER_HOLD])
                ]
        return statuses

    def health(self) -> dict:
        """ws.v1 `health`: the host's own state (its switch, sockets and threads) beside the router's."""
        raise NotImplementedError

    def counters(self) -> dict:
        """ws.v1 `counters`: the router's, and the host's own (its lock's longest hold)."""
        raise NotImplementedError

    def start_counters_phase(self) -> dict:
        """ws.v1 `counters-phase` (under the lock, as every edge operation): a benchmark's phase starts afresh."""
        return {"lock_phase_started": round(self.lock.start_phase(), 3)}

    def satellite_keys(self) -> dict:
        """ws.v1 `satellite-keys`: the radio's settings (its file, off the controller's lock), every device's own
        key and the devices denied (under it), as a satellite access point serves them
        (`satellites.keys_for_satellite`)."""
        radio = self.radio_settings.radio_settings()
        with self.lock:
            keys, denied = self.router.passphrases.all(), satellites.denied_macs(self.router)
        return satellites.keys_for_satellite(radio, keys, denied)

    def call(self, name: str, *args, role: str = authority.OWNER):
        """Run the ws.v1 operation `name` for a role (`authority`: a refusal changes nothing); state changes
        reach the switch (and hostapd), and the disk, before the answer."""
        op = operations.BY_NAME[name]
        if op.answers == "radio":  # a file behind a lock of its own: no device waits on its I/O
            authority.check(None, role, op, list(args))  # it names no device: the router is not read
            return op.call(self.radio_settings, *args)
        if op.answers == "satellite":  # the radio's file off the controller's lock, the keys under it
            authority.check(None, role, op, list(args))
            return op.call(self)
        if op.name == "status" and not args:
            return self._every_status(op, role)
        with self.lock:
            if op.answers == "edge":
                authority.check(None, role, op, list(args))
                result = op.call(self)  # the edge's own state beside the router's
            else:
                result = operations.perform(
                    self.router,
                    op,
                    list(args),
                    lambda effects: self._apply(effects, at_once=True),
                    self.switch_ready,
                    role,
                )
        if op.decision and not self.router.store.flush():
            LOG.error("%s %s: not on the disk within the time allowed", name, args[0] if args else "")
        if name in self.WIFI_KEY_CHANGES:
            assert isinstance(result, dict)
            result = dict(result, **self.authenticator.publish_keys())
        return result
