"""What the household and the end-host agents tell the router through hwdb: app priorities
(`AppPriority`, written by the web UI) and which program owns a connection (`AppTuples`,
written by agents).

One thread subscribes to both tables, reads AppPriority's history once (it is persistent: a
restart of the controller or the router restores the household's choices), and checks its
subscriptions are still alive every CHECK_S (hwdb forgets them when it restarts: then it
subscribes at once and reads the history again). Rows are parsed and checked here, outside the
controller's lock; the router gets small, valid updates (`on_priorities({app: priority})`,
`on_reports([AgentReport])`). A bad row costs that row only: it is counted, and the log says how
many were ignored at most once every REJECTED_LOG_S (a device on the LAN may send bad rows as fast
as it likes; a line per row would fill the log's queue). A batch keeps at most a device's cap of
reports per address, its latest: the earlier ones would only evict each other in the router's book,
under its lock.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable

from ...concerns.agent_reports import MAX_REPORTS_PER_DEVICE, AgentReport
from ...flows import PROTO_TCP, PROTO_UDP
from ...policy.apps import PRIORITIES

LOG = logging.getLogger(__name__)

# How often the subscriptions are checked: a restarted hwdb has forgotten them, and a priority the
# household sets meanwhile acts only once the feed has subscribed again and read the history.
CHECK_S = 2.0
REPORTS_REREAD_S = 60
MAX_NAME = 64
REJECTED_LOG_S = 60.0
SHOWN_ROW_CHARS = 120


class RejectedRows:
    """Bad rows of one table: counted, and logged as one line per REJECTED_LOG_S with the last reason."""

    def __init__(self, table: str, clock: Callable[[], float] = time.monotonic):
        self.table, self.clock = table, clock
        self.count = 0
        self._unlogged = 0
        self._next_log = float("-inf")
        self._lock = threading.Lock()  # a subscription's thread and the feed's own may both deliver

    def note(self, row, reason: Exception) -> None:
        with self._lock:
            self.count += 1
            self._unlogged += 1
            now = self.clock()
            if now < self._next_log:
                return
            unlogged, self._unlogged, self._next_log = self._unlogged, 0, now + REJECTED_LOG_S
        LOG.warning(
            "ignored %d %s row(s) since the last such line (%d in all); the latest: %s (%.*s)",
            unlogged,
            self.table,
            self.count,
            reason,
            SHOWN_ROW_CHARS,
            repr(row),
        )


def _printable(value, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME or not value.isprintable():
        raise ValueError(f"{what} must be 1-{MAX_NAME} printable characters, not {value!r}")
    return value


def parse_priorities(rows: list[dict], rejected: RejectedRows | None = None) -> dict[str, str]:
    """AppPriority rows, oldest first -> {app: priority}: the last row per app wins."""
    rejected = rejected or RejectedRows("AppPriority")
    out: dict[str, str] = {}
    for row in rows:
        try:
            app = _printable(row.get("app"), "app")
            priority = row.get("priority")
            if priority not in PRIORITIES:
                raise ValueError(f"priority must be one of {PRIORITIES}, not {priority!r}")
        except ValueError as exc:
            rejected.note(row, exc)
            continue
        out[app] = priority
    return out


def _port(value, what: str, allow_zero: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not (0 if allow_zero else 1) <= value <= 65535:
        raise ValueError(f"{what} {value!r} is not a port")
    return value


def _ipv4(value, checked: dict) -> str:
    """An IPv4 address (a string) in its usual form; ValueError if it is not one."""
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an IPv4 address")
    known = checked.get(value)
    if known is None:
        known = checked[value] = str(ipaddress.IPv4Address(value))
    return known


def parse_reports(
    rows: list[dict], rejected: RejectedRows | None = None, per_address: int = MAX_REPORTS_PER_DEVICE
) -> list[AgentReport]:
    """AppTuples rows -> AgentReports (an unconnected UDP socket: daddr "*", dport 0), each connection
    once and at most `per_address` per sender address, the latest."""
    rejected = rejected or RejectedRows("AppTuples")
    addresses: dict = {}  # a batch names few addresses (a flood, one): each is checked once
    out: list[AgentReport] = []
    for row in reversed(rows):
        try:
            proto = row.get("proto")
            if proto not in (PROTO_TCP, PROTO_UDP):
                raise ValueError(f"proto {proto!r} is neither TCP nor UDP")
            saddr = _ipv4(row.get("saddr"), addresses)
            daddr = row.get("daddr")
            daddr = daddr if daddr == "*" else _ipv4(daddr, addresses)
            dport = _port(row.get("dport"), "dport", allow_zero=daddr == "*")
            if daddr == "*" and dport != 0:
                raise ValueError("an unconnected socket (daddr '*') has dport 0")
            out.append(
                AgentReport(
                    proto, saddr, _port(row.get("sport"), "sport"), daddr, dport, _printable(row.get("app"), "app")
                )
            )
        except (ValueError, TypeError) as exc:
            rejected.note(row, exc)
    latest: dict[tuple, AgentReport] = {}
    per_sender: dict[str, int] = {}
    for report in out:  # newest first
        if report.connection in latest or per_sender.get(report.saddr, 0) >= per_address:
            continue
        latest[report.connection] = report
        per_sender[report.saddr] = per_sender.get(report.saddr, 0) + 1
    return list(reversed(latest.values()))


REPORTS_PER_HOLD = 128


def in_turns(reports: list[AgentReport]) -> list[list[AgentReport]]:
    """A batch in parts small enough that the router takes each under its lock in turn with
    everything else (DHCP, DNS), not a flood's whole batch in one hold."""
    return [reports[i : i + REPORTS_PER_HOLD] for i in range(0, len(reports), REPORTS_PER_HOLD)]


class AppFeed:
    def __init__(
        self,
        address: str,
        on_priorities: Callable[[dict[str, str]], None],
        on_reports: Callable[[list[AgentReport]], None],
        client_factory=None,
        check_s: float = CHECK_S,
    ):
        self.address = address
        self.on_priorities, self.on_reports = on_priorities, on_reports
        self.check_s = check_s
        self._client_factory = client_factory
        self._stop = threading.Event()
        self.rejected_priorities, self.rejected_reports = RejectedRows("AppPriority"), RejectedRows("AppTuples")
        self.subscribed = False  # both subscriptions live and the history read (health)
        self.restored = threading.Event()  # the household's priorities have been read once

    def start(self) -> None:
        threading.Thread(target=self._run, name="hwdb-app-feed", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _client(self):
        if self._client_factory is None:
            from hwdb_client import HwdbClient

            host, port = self.address.rsplit(":", 1)
            self._client_factory = lambda: HwdbClient(host, int(port), timeout=5.0)
        return self._client_factory()

    def _run(self) -> None:
        while not self._stop.is_set():
            subs: list = []
            try:
                client = self._client()
                # Subscribe first, then read the history: a priority set in between arrives twice, never not at all.
                subs.append(
                    client.subscribe(
                        "select * from AppPriority",
                        lambda r: self._deliver(self.on_priorities, self._priorities, r.rows),
                    )
                )
                subs.append(
                    client.subscribe(
                        "select * from AppTuples", lambda r: self._deliver(self.on_reports, self._reports, r.rows)
                    )
                )
                self._deliver(self.on_priorities, self._priorities, client.query("select * from AppPriority").rows)
                # Reports of connections still open that arrived while nobody was subscribed.
                self._deliver(
                    self.on_reports,
                    self._reports,
                    client.query(f"select * from AppTuples [range {REPORTS_REREAD_S} seconds]").rows,
                )
                self.restored.set()
                self.subscribed = True
                LOG.info("following AppPriority and AppTuples at hwdb %s", self.address)
                while not self._stop.wait(self.check_s):
                    # By id *and* where it delivers: a restarted hwdb numbers subscriptions from 1 again,
                    # so someone else's new subscription may carry our old id.
                    live = {
                        (row["id"], str(row["destination"]).rsplit(":", 1)[-1])
                        for row in client.query("show subscriptions").rows
                    }
                    if not {(s.id, str(s.address[1])) for s in subs} <= live:
                        LOG.warning("hwdb at %s forgot our subscriptions (restarted?); subscribing again", self.address)
                        break
                retry_in = 0.0  # hwdb is back: the household's changes since are in the history we read next
            except Exception as exc:  # hwdb down or refusing: try again later; routing goes on
                LOG.warning("hwdb at %s: cannot follow app priorities (%s); retrying", self.address, exc)
                retry_in = self.check_s
            self.subscribed = False
            for sub in subs:
                sub.stop()
            self._stop.wait(retry_in)

    def _priorities(self, rows: list[dict]) -> dict[str, str]:
        return parse_priorities(rows, self.rejected_priorities)

    def _reports(self, rows: list[dict]) -> list[AgentReport]:
        return parse_reports(rows, self.rejected_reports)

    @staticmethod
    def _deliver(callback, parse, rows) -> None:
        try:
            parsed = parse(rows)
            if parsed:
                callback(parsed)
        except Exception:  # a failure costs this batch only; the subscription goes on
            LOG.exception("app feed: a batch failed")
