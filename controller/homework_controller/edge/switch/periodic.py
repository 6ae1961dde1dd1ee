"""The controller's periodic jobs, each on a thread of its own: the router's tick (and the delegated prefix
read beside it), the switch's flow counters and the radio's link quality polled, the shapers watched, and the
switch told once to export its flow records (again whenever the flow collector restarts: `export_flows`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable

from ...api.server import TimedLock
from ...config import Config
from ...core.router import HomeRouter
from ...effects import Effect
from ...flows import openflow
from ...radio import stations
from ...wire.prefixes import BadPrefix
from ..feeds import flow_export
from ..feeds.hwdb_log import HwdbLog
from ..lan import shaper
from ..lan.ipv6_files import read_delegated
from .switch_connection import SwitchConnection

LOG = logging.getLogger("homework.controller")


class PeriodicJobs:
    """apply: how the router's effects are carried out (`FairServer.apply`)."""

    def __init__(
        self,
        router: HomeRouter,
        lock: TimedLock,
        apply: Callable[[list[Effect]], None],
        switch: SwitchConnection,
        hwdb: HwdbLog,
        shapers: dict[str, shaper.Shaper],
        config: Config,
    ):
        self.router, self.lock, self.apply, self.switch = router, lock, apply, switch
        self.hwdb, self.shapers, self.config = hwdb, shapers, config
        self._delegated_error = ""  # why the prefix file was last refused, logged once

    def start(self) -> None:
        for job in (self._tick, self._poll_counters, self.export_flows):
            threading.Thread(target=job, daemon=True).start()
        if self.shapers:
            threading.Thread(target=self._watch_shapers, daemon=True).start()

    def _tick(self) -> None:
        while True:
            time.sleep(self.config.tick_seconds)
            self._renumber_if_delegated_changed()
            with self.lock:
                if self.switch.datapath is not None:
                    try:
                        self.apply(self.router.tick())
                    except Exception:
                        LOG.exception("lease expiry pass failed")

    def _renumber_if_delegated_changed(self) -> None:
        """The prefix-delegation client rewrites the prefix file beside the database (atomically) when the
        ISP delegates another prefix, or renews it: read it off the lock each tick, renumber when the prefix
        differs, and take its lifetimes (the adverts' cap) whenever they do. The command line's --ipv6-prefix
        is fixed. A file that is not a prefix is logged (once) and changes nothing."""
        if not self.router.ipv6.enabled or self.config.ipv6_prefix:
            return
        try:
            delegated = read_delegated(os.path.dirname(os.path.abspath(self.config.db)))
        except BadPrefix as exc:
            if str(exc) != self._delegated_error:
                LOG.error("%s: the delegated prefix stays %s", exc, self.router.ipv6.delegation()[0])
            self._delegated_error = str(exc)
            return
        self._delegated_error = ""
        prefix, until = (delegated.prefix, delegated.until) if delegated else (None, None)
        prefix_now, until_now = self.router.ipv6.delegation()  # only this thread changes it
        if (prefix, until) != (prefix_now, until_now):
            if prefix != prefix_now:
                LOG.info("delegated prefix %s -> %s: renumbering", prefix_now, prefix)
            with self.lock:
                self.apply(self.router.renumber(prefix, until))

    def _poll_counters(self) -> None:
        """Every interval: ask the switch for flow counters, and the radio for link quality."""
        last_stations: dict = {}
        while True:
            time.sleep(self.config.stats_interval)
            dp = self.switch.datapath
            if dp is not None:
                self.switch.send(dp, openflow.flow_counters_request())
            if self.config.stations:
                radio = self.switch.radio_port
                try:
                    now = stations.read_stations(self.config.stations)
                except (OSError, ValueError, subprocess.SubprocessError) as exc:
                    LOG.debug("no station list from %s: %s", self.config.stations, exc)
                    continue
                elsewhere: set[str] = set()
                if radio is not None:  # a station that roamed to another access point is still in the radio's list
                    with self.lock:
                        elsewhere = {mac for mac in now if self.router.port_binding.port_of(mac) not in (None, radio)}
                        self.apply(self.router.joining.listed_at(radio, now))  # and forgotten there
                for row in stations.link_rows(last_stations, now):
                    if row[0] not in elsewhere:  # its links are that access point's to report
                        self.hwdb.write("Links", row)
                last_stations = now

    def export_flows(self) -> None:
        try:
            flow_export.export_to(self.config.lan_iface, self.config.flow_export_port)
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            LOG.error("the switch does not export its flows (no Flows rows): %s %s", exc, detail.decode().strip())
            return
        LOG.info("switch %s exports its flows to 127.0.0.1:%d", self.config.lan_iface, self.config.flow_export_port)

    def _watch_shapers(self) -> None:
        """The shaped links' trees kept in place, and the household told when High is overloaded (off the lock)."""
        watch = shaper.Watch(self.shapers)
        while True:
            for message in watch.check(time.monotonic()):
                LOG.info("event qos-overload: %s", message)
                self.hwdb.write("Events", ("qos-overload", "", message))
            time.sleep(self.config.stats_interval)
