"""homework-satellite: this box as a satellite access point of the household's router
(`docs/whole-home-wifi.md`).

Its radio serves the router's network (the name, the guest passphrase, every device's own passphrase
and SAE password, all from the router), as a port of a bridge onto its cable into one of the router's
access ports: the router's switch gates every station exactly as on the router's own radio, and the
stations reach each other only through it (hostapd isolates them; the bridge never sends a frame back
out of the port it came in on). The satellite is paired once, with a code the household makes in the
router's web UI. Then it keeps its keys in step with the router's (asked every `POLL_S`; a revoked key
is gone within that) and tells the router which station joined with which key, and which left, so a
device roaming here moves here rather than looks like a copy of itself.

    python -m homework_image.satellite --router http://10.2.0.1 --code ABCD-EFGH \\
        --radio wlan0 --bridge br0 --state /var/lib/homework/satellite --run /run/homework/satellite

The bridge (its radio joins it when hostapd starts) and the box's own address on it (by DHCP from the
router, as any device) are the network set-up's; this only serves the radio and talks to the router. The
bridge's MAC must be set (its cable's), not left to the kernel: a bridge takes its lowest port's, so the
radio joining it would give the box a new MAC, which the router takes for a newcomer's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from homework_controller.model import normalize_mac
from homework_controller.policy import wifi_keys
from homework_controller.radio import hostapd_conf, hostapd_ctrl, private_files, stations

from .radio import AccessPoint, RadioError

LOG = logging.getLogger("homework.satellite")
POLL_S = 2.0  # how often the router is asked whether the keys changed (a revoked key lasts at most this)
REPORT_BATCH = 64  # station events per report, as the router takes them at most
LINKS_S = 5.0  # how often the stations' links are reported (the router's own radio's are read as often)
LINKS_BATCH = 32  # stations' links per report, as the router takes them at most
TIMEOUT_S = 10.0
SESSION_COOKIE = "hw_session"  # the web UI's


class SatelliteError(RuntimeError):
    pass


class Unreachable(SatelliteError):
    """The router did not answer at all (no route to it yet, or it is not listening): worth asking again."""


class Unpaired(SatelliteError):
    """The household removed this satellite (or its session ended): it serves the network no longer."""


@dataclass(frozen=True)
class Network:
    """What the router says this satellite serves: the network, and every device's own key."""

    ssid: str
    passphrase: str  # the guest passphrase
    country: str
    band: str
    channel: int
    keys: tuple[wifi_keys.WifiKey, ...]
    denied: frozenset[str] = frozenset()  # the blacklisted devices: no handshake completes here either

    @classmethod
    def from_router(cls, doc: dict) -> Network:
        try:
            keys = tuple(wifi_keys.WifiKey(k["mac"], k["passphrase"], 0.0) for k in doc["keys"])
            # A router older than the deny list sends none (its own radio still denies; its switch drops them).
            denied = frozenset(normalize_mac(mac) for mac in doc.get("denied", ()))
            radio = (doc["ssid"], doc["passphrase"], doc["country"], doc["band"], int(doc["channel"]))
            return cls(*radio, keys, denied)
        except (KeyError, TypeError, ValueError) as exc:  # a MAC that is not one too (BadMac)
            raise SatelliteError(f"the router's keys are not what a satellite reads: {exc!r}") from None


class RouterLink:
    """The satellite's session with the router's web UI (its cookie and CSRF token, kept in `session_file`)."""

    def __init__(self, base_url: str, session_file: Path, opener: urllib.request.OpenerDirector | None = None):
        self.base_url, self.session_file = base_url.rstrip("/"), session_file
        # No redirects followed: an answer other than the API's is an error, not a page elsewhere.
        self.opener = opener or urllib.request.build_opener(NoRedirects)
        self.session: dict = _json(private_files.read_text(str(session_file)).encode()) or {}
        if not isinstance(self.session, dict):  # a damaged file: pair again
            LOG.warning("%s is not a session: this satellite pairs again", session_file)
            self.session = {}

    @property
    def paired(self) -> bool:
        return bool(self.session.get("cookie"))

    def pair(self, code: str, name: str) -> None:
        """The pairing: a session and CSRF token first (as a browser's page would have), then the code, for the
        satellite's own session (the router binds it to this box's address and lets the box in)."""
        status, headers, doc = self._call("GET", "/api/satellite/pair", session=False)
        if status != 200 or not isinstance(doc, dict):
            raise SatelliteError(f"the router did not offer a pairing ({status}): {_reason(doc)}")
        self.session = {"cookie": _session_cookie(headers), "csrf": doc.get("csrf_token", "")}
        status, headers, doc = self._call("POST", "/api/satellite/pair", {"code": code, "name": name})
        if status != 201 or not isinstance(doc, dict):
            raise SatelliteError(f"the router refused the pairing code ({status}): {_reason(doc)}")
        self.session = {"cookie": _session_cookie(headers), "csrf": doc.get("csrf_token", "")}
        if not self.session["cookie"]:
            raise SatelliteError("the router paired this satellite but gave it no session")
        private_files.write(str(self.session_file), json.dumps(self.session))

    def network(self, version: str) -> tuple[str, Network] | None:
        """The network as the router has it now, and its version; None while it is `version`."""
        headers = {"If-None-Match": f'"{version}"'} if version else {}
        status, answer, doc = self._call("GET", "/api/satellite/keys", headers=headers)
        if status == 304:
            return None
        if status in (401, 403):
            raise Unpaired(f"the router no longer takes this satellite ({status}): {_reason(doc)}")
        if status != 200 or not isinstance(doc, dict):
            raise SatelliteError(f"the router did not give the keys ({status}): {_reason(doc)}")
        return str(doc.get("version") or (answer.get("ETag") or "").strip('"')), Network.from_router(doc)

    def report(self, events: list[dict]) -> list[dict]:
        """The router told of the stations' events; its answer to each, in order (`off_the_air`: a copy of a
        device, to be put off this satellite's air)."""
        status, _, doc = self._call("POST", "/api/satellite/stations", {"events": events})
        results = doc.get("results") if isinstance(doc, dict) else None
        if status != 200 or not isinstance(results, list) or len(results) != len(events):
            raise SatelliteError(f"the router did not take the stations' events ({status}): {_reason(doc)}")
        return [r if isinstance(r, dict) else {"ok": False, "error": "not an answer"} for r in results]

    def report_links(self, links: list[dict]) -> list[str]:
        """The router told of the stations' links ({mac, rssi, retries, packets}, since the last report): those
        of them it has bound at another access point since they joined here (they roamed away without telling
        this one: `roamed_away`, for this access point to forget)."""
        status, _, doc = self._call("POST", "/api/satellite/links", {"links": links})
        if status in (401, 403):
            raise Unpaired(f"the router no longer takes this satellite ({status}): {_reason(doc)}")
        if status != 200 or not isinstance(doc, dict):
            raise SatelliteError(f"the router did not take the stations' links ({status}): {_reason(doc)}")
        roamed_away = doc.get("roamed_away")
        return [mac for mac in roamed_away if isinstance(mac, str)] if isinstance(roamed_away, list) else []

    def _call(self, method: str, path: str, body=None, headers=None, session: bool = True):
        request = urllib.request.Request(self.base_url + path, method=method, headers=dict(headers or {}))
        if body is not None:
            request.data = json.dumps(body).encode()
            request.add_header("Content-Type", "application/json")
        if session:
            request.add_header("Cookie", self.session.get("cookie", ""))
            request.add_header("X-CSRF-Token", self.session.get("csrf", ""))
        try:
            with self.opener.open(request, timeout=TIMEOUT_S) as response:
                return response.status, response.headers, _json(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, _json(exc.read())
        except (urllib.error.URLError, OSError) as exc:
            raise Unreachable(f"the router at {self.base_url} did not answer: {exc}") from None


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _session_cookie(headers) -> str:
    cookies = headers.get_all("Set-Cookie") or ()
    return next((c.split(";", 1)[0] for c in cookies if c.startswith(f"{SESSION_COOKIE}=")), "")


def _json(data: bytes):
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def _reason(doc) -> str:
    return str(doc.get("error", doc)) if isinstance(doc, dict) else "no reason given"


class Radio:
    """This satellite's hostapd: its files, and the process, which this program starts and stops."""

    def __init__(self, interface: str, bridge: str, state: Path, run: Path, channel: int | None):
        self.interface, self.bridge, self.channel = interface, bridge, channel
        self.psk_file, self.pid_file = state / "hostapd.wpa_psk", run / "hostapd.pid"
        self.ctrl_dir = run / "hostapd"
        self.access_point = AccessPoint(
            run / "hostapd.conf", self.psk_file, self.ctrl_dir / interface, start=self.start, stop=self.stop
        )
        self.keys: tuple[wifi_keys.WifiKey, ...] = ()
        self.denied: frozenset[str] = frozenset()  # what the running hostapd's deny list holds

    def serve(self, network: Network) -> str:
        """hostapd serving `network`: its passwords given while it runs, restarted for anything else."""
        self.keys = network.keys
        done = self.access_point.follow(lambda: self.render(network))
        if done == "restarted":
            self.denied = frozenset()  # a new hostapd denies nobody yet
        return done

    def deny(self, denied: frozenset[str]) -> None:
        """The running hostapd's deny list made `denied`, on its socket (`DENY_ACL`, as the router's radio is
        told, `AuthenticatorDeny`): a newly denied station is also put off the air now, not at its next join.
        What hostapd did not take is tried again at the next call (every poll)."""
        ctrl = str(self.access_point.ctrl)
        for mac in sorted(denied ^ self.denied):
            deny = mac in denied
            try:
                hostapd_ctrl.request(ctrl, f"DENY_ACL {'ADD_MAC' if deny else 'DEL_MAC'} {mac}")
                self.denied = self.denied | {mac} if deny else self.denied - {mac}
                if deny:
                    hostapd_ctrl.request(ctrl, f"DEAUTHENTICATE {mac}")
            except hostapd_ctrl.HostapdError as exc:
                LOG.warning("%s", exc)

    def render(self, network: Network) -> str:
        """The key file (every device's own passphrase; the guest line is the renderer's) and hostapd's
        configuration for this radio, bridged."""
        current = private_files.read_text(str(self.psk_file))
        keys = wifi_keys.render_psk_file(current, list(network.keys))
        if keys != current:
            private_files.write(str(self.psk_file), keys)
        settings = {
            "driver": "nl80211",
            "interface": self.interface,
            "bridge": self.bridge,
            "ctrl-dir": str(self.ctrl_dir),
            "ssid": network.ssid,
            "passphrase": network.passphrase,
            "psk-file": str(self.psk_file),
            "country": network.country,
            "band": network.band,
            "channel": str(self.channel or network.channel),
        }
        try:
            return hostapd_conf.conf_from([f"--{option}={value}" for option, value in settings.items()])
        except SystemExit as exc:
            raise RadioError(f"the router's network cannot be served here: {exc}") from None

    def start(self) -> None:
        proc = subprocess.run(
            ["hostapd", "-B", "-P", str(self.pid_file), str(self.access_point.conf)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RadioError(f"hostapd did not start: {(proc.stdout + proc.stderr).strip()[-500:]}")

    def stop(self) -> None:
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return
        try:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.1)
        except ProcessLookupError:
            pass
        self.pid_file.unlink(missing_ok=True)

    def forget(self, mac: str) -> bool:
        """The station dropped from hostapd without a frame to it (`hostapd_ctrl.forget`, if it is gone): it
        roamed to another access point without telling this one, whose stale protected association would
        otherwise make it wait here at its next visit (SA Query). Whether it was dropped."""
        try:
            return hostapd_ctrl.forget(str(self.access_point.ctrl), mac)
        except hostapd_ctrl.HostapdError as exc:
            LOG.warning("forgetting %s: %s", mac, exc)
            return False

    def joined(self, mac: str) -> dict | None:
        """A station hostapd has just authorized, as the router is told of it, with the key it proved (one `STA`,
        `hostapd_ctrl.station`). None: not authorized here (it left meanwhile), or amid a new handshake, when
        hostapd's key id is not the key the station proves yet (`hostapd_ctrl.handshake_under_way`: a station
        back from a roam, say, another device's key id): the `EAPOL-4WAY-HS-COMPLETED` that ends it is its join."""
        try:
            answer = hostapd_ctrl.station(str(self.access_point.ctrl), mac)
        except hostapd_ctrl.HostapdError as exc:
            LOG.warning("how %s joined: %s", mac, exc)
            return None
        return next(iter(self.told_joined(answer)), None)

    def told_joined(self, sta_answer: str) -> list[dict]:
        """hostapd's `STA` or `ALL_STA` answer -> a join for each station authorized by a completed handshake
        (`hostapd_ctrl.stations_present`): its `keyid=` (WPA2), or, over SAE, where hostapd names no key, the
        password the running configuration binds to its MAC."""
        try:
            conf = self.access_point.conf.read_text()
        except OSError:
            conf = ""
        keys = list(self.keys)
        return [
            {
                "event": "joined",
                "mac": mac,
                "keyid": keyid or (hostapd_ctrl.sae_keyid(conf, mac, keys) if over_sae else ""),
            }
            for mac, keyid, over_sae in hostapd_ctrl.stations_present(sta_answer)
        ]


def station_event(radio: Radio, event: str) -> dict | None:
    """A hostapd event as the router is told of it: a station that joined (with the key it proved) or left. A
    station back from a roam this access point did not see completes a handshake without `AP-STA-CONNECTED`:
    that is its join here."""
    left = hostapd_ctrl.station_left(event)
    if left is not None:
        return {"event": "left", "mac": left}
    joined = hostapd_ctrl.station_joined(event)
    if joined is not None and joined[1]:  # WPA2 with a device's own key: hostapd named it
        return {"event": "joined", "mac": joined[0], "keyid": joined[1]}
    mac = joined[0] if joined is not None else hostapd_ctrl.handshake_completed(event)
    return None if mac is None else radio.joined(mac)


class Satellite:
    def __init__(self, link: RouterLink, radio: Radio):
        self.link, self.radio = link, radio
        # Each event with when hostapd said it (monotonic): the log says how long the router took to hear it.
        self.events: queue.SimpleQueue[tuple[float, dict]] = queue.SimpleQueue()
        self.stopped = threading.Event()
        # The joins heard here that the router has not answered yet (how many per station), and when each station's
        # last join was heard: the router's word that a station roamed away holds only if it had heard of every
        # join here before it answered.
        self.handshakes = hostapd_ctrl.Handshakes()  # hostapd's events come from one thread
        self.joins_lock = threading.Lock()
        self.joins_unanswered: dict[str, int] = {}
        self.last_join_heard: dict[str, float] = {}

    def run_forever(self) -> None:
        """Serve the router's network and keep it in step; report the stations from the first time it runs."""
        version, listening, network = "", False, None
        while not self.stopped.is_set():
            try:
                changed = self.link.network(version)
                if changed is not None:
                    version, network = changed
                    LOG.info("the router's network %r: %s", network.ssid, self.radio.serve(network))
                    if not listening:
                        self._listen()
                        listening = True
            except Unpaired as exc:
                # Its keys are no longer kept in step (a revoked one would still join): off the air.
                LOG.error("%s: the radio stops serving the network", exc)
                self.radio.stop()
                self.stopped.set()
            except (SatelliteError, RadioError, OSError) as exc:
                LOG.warning("%s", exc)
            if listening and network is not None and not self.stopped.is_set():
                self.radio.deny(network.denied)
            self.stopped.wait(POLL_S)

    def _listen(self) -> None:
        ctrl = str(self.radio.access_point.ctrl)
        events = hostapd_ctrl.Events(ctrl, self._on_event, on_attach=self._on_attach)
        threading.Thread(target=events.run_forever, daemon=True, name="hostapd-events").start()
        threading.Thread(target=self._report_forever, daemon=True, name="report").start()
        threading.Thread(target=self._report_links_forever, daemon=True, name="links").start()

    def _on_event(self, event: str) -> None:
        heard = time.monotonic()
        if not self.handshakes.heard(event):
            return  # the completion of a handshake whose AP-STA-CONNECTED was told
        told = station_event(self.radio, event)
        if told is not None:
            self._heard(heard, told)
        elif (joined := hostapd_ctrl.station_joined(event)) is not None:
            self.handshakes.untold(joined[0])

    def _on_attach(self) -> None:
        """hostapd (re)started, or this program did: the stations on the air, as if they had just joined."""
        try:
            present = hostapd_ctrl.command(str(self.radio.access_point.ctrl), "all_sta")
        except hostapd_ctrl.HostapdError as exc:
            LOG.warning("the stations on the air: %s", exc)
            return
        heard = time.monotonic()
        for told in self.radio.told_joined(present):
            self._heard(heard, told)

    def _heard(self, heard: float, told: dict) -> None:
        with self.joins_lock:
            if told["event"] == "joined":
                self.joins_unanswered[told["mac"]] = self.joins_unanswered.get(told["mac"], 0) + 1
                self.last_join_heard[told["mac"]] = heard
            else:  # gone from here: nothing to forget, and no entry kept for each MAC that ever came
                self.last_join_heard.pop(told["mac"], None)
        self.events.put((heard, told))

    def _report_forever(self) -> None:
        """The events in order, in batches; one the router did not take is tried again (the station moves only
        once the router hears of it)."""
        waiting: list[tuple[float, dict]] = []
        while not self.stopped.is_set():
            if not waiting:
                waiting.append(self.events.get())
            while len(waiting) < REPORT_BATCH and not self.events.empty():
                waiting.append(self.events.get())
            try:
                answers = self.link.report([told for _, told in waiting])
            except SatelliteError as exc:
                LOG.warning("%s; trying again", exc)
                self.stopped.wait(1)
                continue
            for (heard, told), answer in zip(waiting, answers, strict=True):
                self._follow(told, answer, time.monotonic() - heard)
                self._answered(told)
            waiting = []

    def _answered(self, told: dict) -> None:
        if told["event"] == "joined":
            with self.joins_lock:
                left = self.joins_unanswered.pop(told["mac"], 1) - 1
                if left:
                    self.joins_unanswered[told["mac"]] = left

    def _report_links_forever(self) -> None:
        """Every LINKS_S, the radio's stations' signal, retries and packets since the last time (the kernel's
        nl80211 station dump, read as the router reads its own radio's): the board shows them."""
        before: dict[str, stations.Station] = {}
        while not self.stopped.wait(LINKS_S):
            try:
                now = stations.read_stations(f"nl80211:{self.radio.interface}")
            except OSError as exc:
                LOG.warning("the stations' links: %s", exc)
                continue
            rows = [
                dict(zip(("mac", "rssi", "retries", "packets"), r, strict=True))
                for r in stations.link_rows(before, now)
            ]
            before = now
            try:
                for start in range(0, len(rows), LINKS_BATCH):
                    asked = time.monotonic()
                    with self.joins_lock:
                        unanswered = set(self.joins_unanswered)
                    self._forget(self.link.report_links(rows[start : start + LINKS_BATCH]), asked, unanswered)
            except SatelliteError as exc:  # Unpaired too: the keys' poll stops the radio
                LOG.warning("%s", exc)

    def _forget(self, roamed_away: list[str], asked: float, unanswered: set[str]) -> None:
        """The stations the router has at another access point since they joined here (its answer to the links
        report sent at `asked`) forgotten here, unless a join of theirs here was not answered when it was asked,
        or was heard since: the router's word is then older than the station's latest join here."""
        for mac in roamed_away:
            with self.joins_lock:
                newer = mac in unanswered or self.last_join_heard.get(mac, 0.0) >= asked
            if not newer and self.radio.forget(mac):
                LOG.info("%s roamed to another access point without telling this one: forgotten here", mac)

    def _follow(self, told: dict, answer: dict, took_s: float) -> None:
        """The router's answer to one event: a copy put off the air here; an event it refused costs only itself."""
        if not answer.get("ok", False):
            LOG.warning("the router refused %s of %s: %s", told["event"], told["mac"], answer.get("error"))
            return
        LOG.info(
            "%s %s (%s): on access port %s now, %.0f ms after hostapd said it",
            told["mac"],
            told["event"],
            told.get("keyid") or "-",
            answer.get("access_port"),
            took_s * 1000,
        )
        if answer.get("off_the_air"):
            LOG.warning("%s is a copy of a device of the household's: off this satellite's air", told["mac"])
            try:
                hostapd_ctrl.request(str(self.radio.access_point.ctrl), f"DEAUTHENTICATE {told['mac']}")
            except hostapd_ctrl.HostapdError as exc:
                LOG.warning("%s", exc)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--router", default="http://10.2.0.1", help="the router's web UI, as a LAN device reaches it")
    p.add_argument("--code", help="the pairing code the household's web UI showed (needed once)")
    p.add_argument(
        "--code-file",
        type=Path,
        help="a file that holds the pairing code instead (the satellite role's, from the first-run page): "
        "read when this satellite is not paired, deleted once it is",
    )
    p.add_argument("--name", default="Access point", help="how the household's web UI names this satellite")
    p.add_argument("--radio", default="wlan0", help="the radio's interface")
    p.add_argument("--bridge", default="br0", help="the bridge onto the cable to the router")
    p.add_argument("--channel", type=int, help="this satellite's channel (default: the router's)")
    p.add_argument("--state", type=Path, default=Path("/var/lib/homework/satellite"))
    p.add_argument("--run", type=Path, default=Path("/run/homework/satellite"))
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s homework-satellite: %(message)s")
    args = parse_args(argv)
    for directory in (args.state, args.run):
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    link = RouterLink(args.router, args.state / "session.json")
    if not link.paired:
        code = args.code
        if not code and args.code_file and args.code_file.exists():
            code = args.code_file.read_text().strip()
        if not code:
            print("homework-satellite: not paired: give the code the router's web UI shows (--code)", file=sys.stderr)
            return 2
        while True:
            try:
                link.pair(code, args.name)
                break
            except Unreachable as exc:  # no address of its own yet, or the router is starting: again
                LOG.warning("%s; pairing again in %g s", exc, POLL_S)
                time.sleep(POLL_S)
            except SatelliteError as exc:
                print(f"homework-satellite: {exc}", file=sys.stderr)
                return 1
        LOG.info("paired with the router at %s", args.router)
    if args.code_file:
        args.code_file.unlink(missing_ok=True)  # spent: the session is what this satellite keeps
    radio = Radio(args.radio, args.bridge, args.state, args.run, args.channel)
    satellite = Satellite(link, radio)
    signal.signal(signal.SIGTERM, lambda *_: satellite.stopped.set())
    try:
        satellite.run_forever()
    finally:
        radio.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
