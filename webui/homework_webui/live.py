"""The live picture of the home, fed by hwdb subscriptions, fanned out to browsers by SSE.

hwdb pushes Events and Leases rows when a device asks to join or its lease changes; only
then does the hub ask the controller for the devices' states (one GET: at once for a newcomer,
otherwise at most every REFRESH_SPACING_S however many rows arrive), so a new device reaches the
browsers within one notification plus one loopback request. Links and Flows
rows update signal strength, retransmissions and bandwidth shares, pushed at most once a
second. A watchdog re-subscribes when hwdb restarts (its subscriptions die with it) and
notices the controller coming back, so pages recover without a reload. Events rows written
while no subscription was live are read back from the table (it is persistent), so an alert
is never lost to a restart; none is shown twice.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .controller import DEVICE, ControllerClient, ControllerDownError, ControllerError, seen_by
from .hwdb import Hwdb, HwdbClient, HwdbError

LOG = logging.getLogger(__name__)

LINK_WINDOW = 30.0  # seconds of Links rows behind rssi / retransmission figures
FLOW_WINDOW = 10.0  # seconds of Flows rows behind bandwidth shares
HEARTBEAT_S = 5.0  # how often every device's status is read again while the controller answers
# Every device's status is asked at most this often when Leases and Events rows ask for it: in a storm of
# forged MACs they arrive every 0.2 s (the controller's hwdb batches), each asking the controller for
# hundreds of statuses, whose assembly and encoding competed for the controller's CPU with every other
# device's DHCP and DNS (issue 39). A lone join is still asked about at once.
REFRESH_SPACING_S = 0.5
OVERLOAD_KIND = "qos-overload"
# Another device is using a device's MAC: the Guest Board shows it, so every role hears it.
CLONE_KIND = "mac-clone"
# What the household is told of on its phones (a system notification once they allow it): a
# newcomer, a storm of them, an allowance used up, a device back under a new (private) address.
# Not the wall panel: it shows the board itself.
NOTIFY_KINDS = ("new-device", "newcomer-storm", "allowance", "new-address")
SUBSCRIPTIONS = {
    "Events": "select tstamp, kind, mac, message from Events",
    "Leases": "select mac, ip, hostname, action, state from Leases",
    "Links": "select mac, rssi, retries, packets from Links",
    "Flows": "select saddr, daddr, bytes from Flows",
    "AppTimeseries": "select app, bytes from AppTimeseries",
}
APP_ROLES = ("owner", "member")
# The state behind the captive portal's reason for holding a device back (the controller's `portal.view`):
# a paused device (paused, bedtime, allowance) is a permitted one, as its status says.
PORTAL_STATES = {"pending": "pending", "denied": "denied"}


@dataclass(frozen=True)
class StreamLimits:
    """How many live streams may be open. Each holds a server thread for its whole life, so
    the server is given `max_total` threads on top of those for ordinary requests (see
    __main__.waitress_options), and streams beyond these limits are refused at once."""

    max_total: int = 100
    per_session: int = 4  # a few tabs
    per_account: int = 16  # a few devices


class Client:
    """One browser's live stream: messages to send, and whether it must end now."""

    def __init__(self, role: str, session_id: str, account_id: int):
        self.role, self.session_id, self.account_id = role, session_id, account_id
        self.queue: queue.Queue = queue.Queue(maxsize=256)
        self.ended = False

    def end(self) -> None:
        self.ended = True
        try:
            self.queue.put_nowait(None)  # wakes a stream waiting for its next message
        except queue.Full:
            pass  # it is not waiting: it sees `ended` before its next message


class LiveHub:
    def __init__(
        self,
        controller: ControllerClient,
        hwdb: Hwdb,
        watchdog_interval: float = 1.0,
        limits: StreamLimits = StreamLimits(),
        with_owners: Callable[[list[dict]], list[dict]] = lambda devices: devices,
        satellites: Callable[[], list[dict]] = list,
    ):
        """with_owners: the devices with their owners' accounts (`AccountStore.with_owners`), which decide
        what a member's page may do to each (`broadcast_devices`). satellites: the paired satellite access
        points ({name, mac}, `AccountStore.satellites`), which name the access point each device is on."""
        self.controller, self.hwdb = controller, hwdb
        self.with_owners, self.satellites = with_owners, satellites
        self.limits = limits
        self.interval = watchdog_interval
        self._lock = threading.RLock()
        self._devices: dict[str, dict] = {}
        self._provisional: dict[str, dict] = {}
        self._status_at = 0.0
        self._links: dict[str, deque] = {}
        self._flows: deque = deque()
        # Events handled, by tstamp: the newest, and the recent ones (a catch-up read and a
        # notification can both carry a row).
        self._events_since = time.time_ns()
        self._events_handled: deque[int] = deque(maxlen=256)
        self.health: dict[str, bool | None] = {"controller": None, "hwdb": None}
        self._clients: set[Client] = set()
        self._dirty = False
        self._apps_dirty = False
        self._subs: dict = {}
        self._sub_client: HwdbClient | None = None
        self._stop = threading.Event()
        self._refresh_wanted = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webui-live", daemon=True)
        self._refresher = threading.Thread(target=self._refresh_when_asked, name="webui-refresh", daemon=True)

    # lifecycle

    def start(self) -> None:
        self._thread.start()
        self._refresher.start()

    def stop(self) -> None:
        self._stop.set()
        self._refresh_wanted.set()
        self._thread.join(3)
        self._refresher.join(3)
        self._drop_subscriptions()

    def _run(self) -> None:
        next_probe = 0.0
        while not self._stop.is_set():
            try:
                self._check_hwdb()
                now = time.monotonic()
                # When the controller is down, look every tick; when up, only a slow
                # heartbeat: device changes arrive through hwdb, not by polling.
                if self.health["controller"] is not True or now >= next_probe:
                    self.refresh_devices()
                    next_probe = now + HEARTBEAT_S
                if self._dirty:
                    self._dirty = False
                    self.broadcast_devices()
                if self._apps_dirty:
                    self._apps_dirty = False
                    self.broadcast("apps", {"changed": True}, APP_ROLES)
            except Exception:  # the watchdog must outlive any one bad round
                LOG.exception("live hub round failed")
            self._stop.wait(self.interval)

    # hwdb subscriptions

    def _set_health(self, part: str, ok: bool) -> None:
        if self.health[part] != ok:
            if ok and self.health[part] is None:
                LOG.info("%s answers", part)
            else:
                LOG.warning("%s is %s", part, "back" if ok else "not answering")
            self.health[part] = ok
            self.broadcast("health", dict(self.health))

    def _check_hwdb(self) -> None:
        try:
            if self._sub_client is None:
                self._sub_client = self.hwdb.client()
            client = self._sub_client
            if self._subs:
                alive = {(r["id"], r["destination"]) for r in client.query("show subscriptions").rows}
                ours = {(s.id, f"{s.address[0]}:{s.address[1]}") for s in self._subs.values()}
                if ours <= alive:
                    self._set_health("hwdb", True)
                    return
                LOG.warning("hwdb lost our subscriptions (restarted?): subscribing again")
                self._drop_subscriptions(unsubscribe=False)
            self._subscribe(client)
            self._catch_up_events()
            self._seed()
            self._set_health("hwdb", True)
            self.refresh_devices()
            self.broadcast_devices()
        except (HwdbError, OSError) as exc:
            LOG.debug("hwdb check failed: %s", exc)
            self._drop_subscriptions(unsubscribe=False)
            if self._sub_client is not None:
                self._sub_client.close()
                self._sub_client = None
            self._set_health("hwdb", False)

    def _subscribe(self, client: HwdbClient) -> None:
        handlers = {
            "Events": self._on_events,
            "Leases": self._on_leases,
            "Links": self._on_links,
            "Flows": self._on_flows,
            "AppTimeseries": self._on_apps,
        }
        for table, text in SUBSCRIPTIONS.items():
            self._subs[table] = client.subscribe(text, self._guard(handlers[table]))

    def _drop_subscriptions(self, unsubscribe: bool = True) -> None:
        for sub in self._subs.values():
            try:
                sub.close() if unsubscribe else sub.stop()
            except (HwdbError, OSError):
                sub.stop()
        self._subs = {}

    @staticmethod
    def _guard(handler):
        def run(result):
            try:
                handler(result.rows)
            except Exception:
                LOG.exception("handling hwdb notification")

        return run

    def _seed(self) -> None:
        """Fill the windows from history, so a restart does not show blank bars."""
        links = self.hwdb.query(
            f"select tstamp, mac, rssi, retries, packets from Links [range {int(LINK_WINDOW)} seconds]"
        )
        flows = self.hwdb.query(f"select tstamp, saddr, daddr, bytes from Flows [range {int(FLOW_WINDOW)} seconds]")
        with self._lock:
            self._links.clear()
            self._flows.clear()
            for r in links.rows:
                sample = (r["tstamp"] / 1e9, r["rssi"], r["retries"], r["packets"])
                self._links.setdefault(r["mac"], deque()).append(sample)
            for r in flows.rows:
                self._flows.append((r["tstamp"] / 1e9, r["saddr"], r["daddr"], r["bytes"]))

    def _catch_up_events(self) -> None:
        """Handle the Events rows written while we had no subscription."""
        missed = self.hwdb.query(f"select tstamp, kind, mac, message from Events [since {self._events_since}]")
        if missed.rows:
            LOG.info("%d Events rows written while not subscribed", len(missed.rows))
            self._on_events(missed.rows)

    def _on_events(self, rows) -> None:
        with self._lock:
            rows = [r for r in rows if r["tstamp"] not in self._events_handled]
            for r in rows:
                self._events_handled.append(r["tstamp"])
                self._events_since = max(self._events_since, r["tstamp"])
        if not rows:
            return
        now = time.time()
        for r in rows:
            if r["kind"] in NOTIFY_KINDS:
                self.broadcast(
                    "alert",
                    {"time": r["tstamp"] / 1e9, "kind": r["kind"], "mac": r["mac"], "message": r["message"]},
                    APP_ROLES,
                )
            if r["kind"] == "new-device" and r["mac"]:
                with self._lock:
                    if r["mac"] not in self._devices:
                        self._provisional[r["mac"]] = {
                            "mac": r["mac"],
                            "state": "pending",
                            "ip": None,
                            "hostname": "",
                            "name": "",
                            "vendor_class": "",
                            "first_seen": now,
                            "last_seen": now,
                            "lease_seconds_left": 0,
                        }
            elif r["kind"] == OVERLOAD_KIND:
                self.broadcast(
                    "alert", {"time": r["tstamp"] / 1e9, "kind": r["kind"], "message": r["message"]}, APP_ROLES
                )
            elif r["kind"] == CLONE_KIND and r["mac"]:
                self.broadcast(
                    "alert", {"time": r["tstamp"] / 1e9, "kind": r["kind"], "mac": r["mac"], "message": r["message"]}
                )
        # Show what the event says at once, then what the controller says: for a newcomer at once too, as the
        # board may act on it only once the controller says what each role may do to it (its `may`), and
        # the controller tells of a storm's newcomers once (`newcomer-storm`), so these rows stay few.
        self.broadcast_devices()
        if any(r["kind"] == "new-device" for r in rows):
            self.refresh_devices()
            self.broadcast_devices()
        else:
            self.refresh_soon()

    def _on_leases(self, rows) -> None:
        self.refresh_soon()

    def _on_links(self, rows) -> None:
        now = time.time()
        with self._lock:
            for r in rows:
                self._links.setdefault(r["mac"], deque()).append((now, r["rssi"], r["retries"], r["packets"]))
        self._dirty = True

    def _on_flows(self, rows) -> None:
        now = time.time()
        with self._lock:
            for r in rows:
                self._flows.append((now, r["saddr"], r["daddr"], r["bytes"]))
        self._dirty = True

    def _on_apps(self, rows) -> None:
        self._apps_dirty = True

    # the controller's view

    def refresh_soon(self) -> None:
        """Every device's status asked of the controller and shown, now if it was not asked within the last
        REFRESH_SPACING_S, else once that has passed: rows that arrive meanwhile share that one request."""
        self._refresh_wanted.set()

    def _refresh_when_asked(self) -> None:
        while not self._stop.is_set():
            self._refresh_wanted.wait()
            self._refresh_wanted.clear()
            if self._stop.is_set():
                return
            try:
                self.refresh_devices()
                self.broadcast_devices()
            except Exception:  # the refresher must outlive any one bad round, as the watchdog does
                LOG.exception("refreshing the devices failed")
            self._stop.wait(REFRESH_SPACING_S)

    def refresh_devices(self) -> list[dict] | None:
        try:
            status = self.controller.status()
        except (ControllerDownError, ControllerError):
            self._set_health("controller", False)
            return None
        with self._lock:
            self._devices = {d["mac"]: d for d in status}
            # The controller's word is final: a joiner it no longer knows (one of a storm of
            # forged MACs it let go) leaves the board with it.
            self._provisional.clear()
            self._status_at = time.monotonic()
        self._set_health("controller", True)
        return status

    def device_state_for_ip(self, ip: str, max_age: float = 2.0) -> str | None:
        """The state of the device holding `ip` ("unknown" if none), or None when the
        controller cannot say."""
        if time.monotonic() - self._status_at > max_age:
            self.refresh_devices()
        state = self._state_of(ip)
        if state in (None, "permitted"):
            return state
        # A device just let in, or just given its lease, must not wait for the cache: the controller is
        # asked about this one device (every device's status, per request of a held-back device, was
        # 175 KB with 300 devices, and anyone on the LAN may send requests). Let in since, it is on the
        # board at once (its pages find it there): every device's status then, once per device let in.
        asked = self._state_asked(ip)
        if asked == "permitted":
            self.refresh_devices()
        return asked

    def _state_asked(self, ip: str) -> str | None:
        try:
            # For the device at `ip`, whose request this is: the captive portal's question, asked as the device.
            view = self.controller.acting_as(DEVICE).portal(ip)
        except ControllerDownError:
            self._set_health("controller", False)
            return None
        except ControllerError as exc:
            return "unknown" if exc.status == 404 else None
        return PORTAL_STATES.get(view.get("reason") or "", "permitted")

    def _state_of(self, ip: str) -> str | None:
        with self._lock:
            if not self._status_at:
                return None
            for d in self._devices.values():
                if d.get("ip") == ip:
                    return d["state"]
        return "unknown"

    def update_device(self, device: dict, instead_of: str | None = None) -> None:
        """The device's new status, which every page learns; instead_of: the MAC it had (merged into
        its new one), which leaves the board."""
        with self._lock:
            if instead_of is not None:
                self._devices.pop(instead_of, None)
            self._devices[device["mac"]] = device
            self._provisional.pop(device["mac"], None)
        self.broadcast_devices()

    def devices(self) -> list[dict]:
        """Controller devices + provisional joiners + devices only heard over the air,
        with their link figures and bandwidth share."""
        now = time.time()
        with self._lock:
            for mac, samples in list(self._links.items()):
                while samples and samples[0][0] < now - LINK_WINDOW:
                    samples.popleft()
                if not samples:
                    del self._links[mac]
            while self._flows and self._flows[0][0] < now - FLOW_WINDOW:
                self._flows.popleft()
            per_ip: dict[str, int] = {}
            for _, saddr, daddr, nbytes in self._flows:
                per_ip[saddr] = per_ip.get(saddr, 0) + nbytes
                per_ip[daddr] = per_ip.get(daddr, 0) + nbytes
            merged = {**self._provisional, **self._devices}
            out = [dict(d) for d in merged.values()]
            for mac in self._links:
                if mac not in merged:
                    out.append(
                        {
                            "mac": mac,
                            "state": "nearby",
                            "ip": None,
                            "hostname": "",
                            "name": "",
                            "vendor_class": "",
                            "first_seen": None,
                            "last_seen": None,
                            "lease_seconds_left": 0,
                        }
                    )
            device_bytes = {d["mac"]: per_ip.get(d["ip"], 0) for d in out if d.get("ip")}
            total = sum(device_bytes.values())
            for d in out:
                # A joiner the controller has not described yet, or an older controller: the
                # same shape, nothing suspected and no passphrase of its own.
                d.setdefault("clone_suspected", None)
                d.setdefault("wifi_key", None)
                samples = self._links.get(d["mac"], deque())
                if samples:
                    packets = sum(s[3] for s in samples)
                    retries = sum(s[2] for s in samples)
                    d["rssi"] = samples[-1][1]
                    d["retry_ratio"] = round(retries / packets, 3) if packets else 0.0
                else:
                    d["rssi"], d["retry_ratio"] = None, 0.0
                nbytes = device_bytes.get(d["mac"], 0)
                d["bytes_per_s"] = round(nbytes / FLOW_WINDOW)
                d["share"] = round(nbytes / total, 3) if total else 0.0
        name_access_points(out, self.satellites())
        return sorted(out, key=lambda d: (d.get("first_seen") or 0, d["mac"]))

    # browsers

    def register(self, role: str, session_id: str, account_id: int) -> Client | None:
        """A new live stream, or None when the session, the account or the router already
        has as many as it may."""
        with self._lock:
            if (
                len(self._clients) >= self.limits.max_total
                or sum(c.session_id == session_id for c in self._clients) >= self.limits.per_session
                or sum(c.account_id == account_id for c in self._clients) >= self.limits.per_account
            ):
                return None
            c = Client(role, session_id, account_id)
            self._clients.add(c)
            return c

    def unregister(self, c: Client) -> None:
        with self._lock:
            self._clients.discard(c)

    def stream_count(self) -> int:
        with self._lock:
            return len(self._clients)

    def end_streams(self, session_id: str | None = None, account_id: int | None = None) -> None:
        """End at once the streams of a session signed out, or of an account deleted or
        given a new password."""
        with self._lock:
            ending = [c for c in self._clients if c.session_id == session_id or c.account_id == account_id]
            self._clients.difference_update(ending)
        for c in ending:
            c.end()

    def broadcast(self, event: str, data, roles=None) -> None:
        message = _message(event, data)
        with self._lock:
            clients = list(self._clients)
        for c in clients:
            if roles is None or c.role in roles:
                self._send(c, message)

    def broadcast_devices(self) -> None:
        """Every page the devices as its session sees them (`seen_by`: what its role may do to each, a
        member only to their own): made once per role (per member), and every page of it sent that."""
        with self._lock:
            clients = list(self._clients)
        if not clients:
            return
        devices = self.with_owners(self.devices())
        messages: dict[tuple[str, int | None], str] = {}
        for c in clients:
            view = (c.role, c.account_id if c.role == "member" else None)
            if view not in messages:
                messages[view] = _message("devices", seen_by(devices, c.role, c.account_id))
            self._send(c, messages[view])

    def _send(self, c: Client, message: str) -> None:
        try:
            c.queue.put_nowait(message)
        except queue.Full:
            # A browser that stopped reading: let its stream end; EventSource reconnects.
            self.unregister(c)
            c.end()


ROUTER_RADIO = "router"


def name_access_points(devices: list[dict], satellites: list[dict]) -> None:
    """Each device's `access_point`: the name of the satellite whose cable's access port it is on (the router
    binds a station to the port of the access point that authenticated it), ROUTER_RADIO for a station the
    router's own radio hears (its link figures: only that radio's stations have any), None otherwise (a
    cable, or not known yet). A satellite's own device is on its cable, not on itself."""
    named = {s["mac"]: s["name"] for s in satellites}
    by_port = {d["access_port"]: named[d["mac"]] for d in devices if d["mac"] in named and d.get("access_port")}
    for d in devices:
        port = d.get("access_port")
        if d["mac"] not in named and port in by_port:
            d["access_point"] = by_port[port]
        else:
            d["access_point"] = ROUTER_RADIO if d.get("rssi") is not None and d["mac"] not in named else None


def _message(event: str, data) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"
