"""hostapd's control socket, through `hostapd_cli` (the I/O edge; nothing here decides anything)."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

from ..effects import AuthenticatorDeny, AuthenticatorForget, AuthenticatorKick, AuthenticatorWord
from ..policy import wifi_keys
from . import hostapd_conf, private_files

LOG = logging.getLogger(__name__)


class HostapdError(RuntimeError):
    pass


def command(ctrl: str, *words: str, timeout: float = 5) -> str:
    """Run one control command on hostapd's socket `ctrl` (DIR/IFACE); its answer, or HostapdError."""
    ctrl_dir, _, iface = ctrl.rpartition("/")
    try:
        proc = subprocess.run(
            ["hostapd_cli", "-p", ctrl_dir, "-i", iface, *words], capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise HostapdError(f"hostapd did not take `{' '.join(words)}`: {exc}") from None
    answer = (proc.stdout + proc.stderr).strip()
    # hostapd_cli exits 0 when hostapd answers FAIL, and prints "Failed to connect" when it is not there.
    if proc.returncode != 0 or "FAIL" in proc.stdout or answer.startswith("Failed to connect"):
        raise HostapdError(f"hostapd did not take `{' '.join(words)}`: {answer or proc.returncode}")
    return proc.stdout.strip()


@contextlib.contextmanager
def _client_socket(name: str) -> Iterator[socket.socket]:
    """A datagram socket bound to a path of its own: hostapd answers a named socket only (not an abstract
    one), as hostapd_cli's in /tmp (a service talking to hostapd shares its private /tmp)."""
    local = os.path.join(tempfile.gettempdir(), f"homework-hostapd-{name}-{os.getpid()}-{threading.get_ident()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(local)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(local)
        try:
            yield sock
        finally:
            os.unlink(local)


def request(ctrl: str, message: str, timeout: float = 5) -> str:
    """One request on hostapd's control socket `ctrl` from this process itself, not through hostapd_cli:
    for one that carries a secret, which a command line shows every process of the box (/proc/PID/cmdline).
    Its answer, or HostapdError (hostapd answered FAIL, or is not there), which names the request's first
    two words only."""
    what = " ".join(message.split(" ", 2)[:2])
    try:
        with _client_socket("request") as sock:
            sock.settimeout(timeout)
            sock.connect(ctrl)
            sock.send(message.encode())
            answer = sock.recv(4096).decode("utf-8", "replace").strip()
    except OSError as exc:
        raise HostapdError(f"hostapd did not take `{what}`: {exc}") from None
    if answer.startswith("FAIL"):
        raise HostapdError(f"hostapd did not take `{what}`: {answer}")
    return answer


def station(ctrl: str, mac: str) -> str:
    """hostapd's `STA` answer for one station, asked on its socket from this process: a join is judged from it,
    and a `hostapd_cli` started per join costs a process start, most of a roam's gap on a slow CPU."""
    return request(ctrl, f"STA {mac}")


def station_joined(event: str) -> tuple[str, str] | None:
    """`<3>AP-STA-CONNECTED 02:..:01 keyid=dev-0200...` -> (MAC, keyid; "" without one); None for other events."""
    words = event.split(">", 1)[-1].split()
    if len(words) < 2 or words[0] != "AP-STA-CONNECTED":
        return None
    keyid = next((w[len("keyid=") :] for w in words[2:] if w.startswith("keyid=")), "")
    return words[1], keyid


def handshake_completed(event: str) -> str | None:
    """`<3>EAPOL-4WAY-HS-COMPLETED 02:..:01` -> the MAC; None for other events. A station that roams back to an
    access point that never heard it leave completes a handshake there without a new `AP-STA-CONNECTED`: its
    key id is then asked of hostapd (`STA`, `stations_present`, which takes it only from a completed handshake:
    by the time it is asked, another may have begun)."""
    words = event.split(">", 1)[-1].split()
    return words[1] if len(words) >= 2 and words[0] == "EAPOL-4WAY-HS-COMPLETED" else None


class Handshakes:
    """hostapd says `AP-STA-CONNECTED` when a station is authorized, then `EAPOL-4WAY-HS-COMPLETED` for the same
    handshake: that second word is not a join of its own (judged again, it cost a `STA` and, at a satellite, a
    report). One that comes alone is: a station back from a roam this access point did not see (it never left
    here: no new `AP-STA-CONNECTED`), or a new handshake. Only a completion soon after the station's
    `AP-STA-CONNECTED` is taken for the same handshake's (tens of milliseconds after it; a wired 802.1X join has
    no 4-way handshake at all): a station gone and back within that second, unheard, is missed until its next
    word."""

    SAME_HANDSHAKE_S = 1.0

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.connected: dict[str, float] = {}  # MAC -> when its AP-STA-CONNECTED was heard (until it completes)

    def heard(self, event: str) -> bool:
        """Whether the event is news (a join or a station leaving to judge); False for the completion of a
        handshake whose station was judged at its `AP-STA-CONNECTED`."""
        joined = station_joined(event)
        if joined is not None:
            self.connected[joined[0]] = self.clock()
            return True
        completed = handshake_completed(event)
        if completed is not None:
            at = self.connected.pop(completed, None)
            return at is None or self.clock() - at >= self.SAME_HANDSHAKE_S
        left = station_left(event)
        if left is not None:
            self.connected.pop(left, None)
        return True

    def untold(self, mac: str) -> None:
        """Its `AP-STA-CONNECTED` told nothing (its key not known yet): its handshake's completion is judged."""
        self.connected.pop(mac, None)


def station_left(event: str) -> str | None:
    """`<3>AP-STA-DISCONNECTED 02:..:01` -> the MAC; None for other events."""
    words = event.split(">", 1)[-1].split()
    return words[1] if len(words) >= 2 and words[0] == "AP-STA-DISCONNECTED" else None


# The AKM suites (IEEE 802.11 RSN selectors, as hostapd's `STA` answer writes them) that are SAE:
# SAE, FT over SAE, and SAE with a group-dependent hash.
SAE_AKMS = frozenset({"00-0f-ac-8", "00-0f-ac-9", "00-0f-ac-24", "00-0f-ac-25"})


def joined_over_sae(sta_answer: str) -> bool:
    """hostapd's `STA <mac>` answer says the station's key came from SAE (its `AKMSuiteSelector=`)."""
    for line in sta_answer.splitlines():
        if line.startswith("AKMSuiteSelector="):
            return line.removeprefix("AKMSuiteSelector=").strip().lower() in SAE_AKMS
    return False


def sae_keyid(conf_text: str, mac: str, keys: list[wifi_keys.WifiKey]) -> str:
    """The key id of the device key a station proved over SAE: hostapd reports none, but an SAE join
    under a MAC that hostapd's running configuration binds to a password (`conf_text`) used that
    password. It is the device's own key only while that password is the key's passphrase now (a key
    issued again is not live until the configuration is rendered again). "" for anything else."""
    bound = hostapd_conf.sae_bindings(conf_text).get(mac.lower())
    for key in keys:
        if bound is not None and key.mac == mac.lower() and key.passphrase == bound:
            return key.keyid
    return ""


# hostapd's pairwise key state machine (src/ap/wpa_auth_i.h, `wpa_ptk_state`) once a station's 4-way handshake
# has completed (or FT/FILS stood in for it): PTKINITDONE, as its `STA` answer writes it (hostapdWPAPTKState=).
PTK_INIT_DONE = 11


def handshake_under_way(sta_answer: str) -> int | None:
    """The pairwise key state hostapd's `STA` answer shows for a station amid a 4-way handshake; None when its
    handshake is done (PTKINITDONE), or the answer shows no WPA state at all (no WPA on that network).

    Its `keyid=` then names no key the station proved. hostapd (2.10, the image's) does not keep which key a
    station proved: `STA` and `AP-STA-CONNECTED` look its PMK up in the key list as
    it is at that moment (sta_info.c, ap_sta_wpa_get_keyid: the first entry whose PSK equals it). At each
    (re)association the PMK is first set to the list's first entry that fits the station's MAC (wpa_auth.c,
    SM_STATE(WPA_PTK, INITPSK); the file's last wildcard line: each line read goes to the head of the list), and
    becomes the station's own only when its message 2/4 is checked (PTKCALCNEGOTIATING). A station back from a
    roam at an access point that never heard it leave keeps its [AUTHORIZED] entry through that new handshake
    (hostapd_new_assoc_sta: WPA_REAUTH), so it looks joined, with another device's key id, until then."""
    for line in sta_answer.splitlines():
        if line.startswith("hostapdWPAPTKState="):
            try:
                state = int(line.removeprefix("hostapdWPAPTKState="))
            except ValueError:
                return None
            return None if state == PTK_INIT_DONE else state
    return None


# A station an access point is told to forget (it roamed to another) is forgotten only if it sent that one nothing
# for this long: one amid a handshake there, or just back from a roam, is not gone, whatever the router heard last.
GONE_AFTER_MS = 200


def forget(ctrl: str, mac: str) -> bool:
    """hostapd drops the station without a frame to it (`DEAUTHENTICATE <mac> tx=0`) if it is gone
    (`gone_for(GONE_AFTER_MS)`): whether it did. HostapdError if hostapd did not answer."""
    if not gone_for(request(ctrl, f"STA {mac}"), GONE_AFTER_MS):
        return False
    request(ctrl, f"DEAUTHENTICATE {mac} tx=0")
    return True


def gone_for(sta_answer: str, ms: int) -> bool:
    """Whether hostapd's `STA` answer shows a station whose handshake is done and that has sent nothing for at
    least `ms` (`inactive_msec=`, the driver's count): not one amid a handshake, nor one just back."""
    if "[AUTHORIZED]" not in sta_answer or handshake_under_way(sta_answer) is not None:
        return False
    for line in sta_answer.splitlines():
        if line.startswith("inactive_msec="):
            try:
                return int(line.removeprefix("inactive_msec=")) >= ms
            except ValueError:
                return False
    return False


def _station_blocks(all_sta_answer: str) -> Iterator[list[str]]:
    """hostapd's `ALL_STA` answer (each station's `STA` answer in turn, its MAC the first line) -> each station's
    lines."""
    for block in re.split(r"(?m)^(?=[0-9a-f]{2}(?::[0-9a-f]{2}){5}$)", all_sta_answer):
        if lines := block.splitlines():
            yield lines


def stations_present(all_sta_answer: str) -> list[tuple[str, str, bool]]:
    """hostapd's `ALL_STA` answer -> (MAC, keyid or "", joined over SAE) for each station authorized by a
    handshake that completed. One amid a handshake (`handshake_under_way`: its key id is not the key it proves)
    is left out: it is judged at the `EAPOL-4WAY-HS-COMPLETED` that ends it (or it fails, and hostapd says it
    left)."""
    present = []
    for lines in _station_blocks(all_sta_answer):
        block = "\n".join(lines)
        if "[AUTHORIZED]" not in block:
            continue
        keyid = next((line.removeprefix("keyid=") for line in lines if line.startswith("keyid=")), "")
        state = handshake_under_way(block)
        if state is not None:
            LOG.info(
                "%s is amid a new handshake (hostapd's PTK state %d; its keyid=%s is not the key it proves yet): "
                "judged when it completes",
                lines[0].strip(),
                state,
                keyid or "-",
            )
            continue
        present.append((lines[0].strip(), keyid, joined_over_sae(block)))
    return present


def joining(all_sta_answer: str) -> list[str]:
    """The stations of hostapd's `ALL_STA` answer amid joining: authenticated (perhaps associated) but not yet
    authorized by a completed 4-way handshake, or amid a new one (back from a roam, say). One that is leaving
    (its flags emptied, its entry waiting to be removed) is not."""
    busy = []
    for lines in _station_blocks(all_sta_answer):
        flags = next((line.removeprefix("flags=") for line in lines if line.startswith("flags=")), "")
        if "[AUTH]" not in flags:
            continue
        if "[AUTHORIZED]" not in flags or handshake_under_way("\n".join(lines)) is not None:
            busy.append(lines[0].strip())
    return busy


# How long reading the key file again waits, at most, for the stations amid joining to finish first (a handshake
# takes well under a second, a few under a slow emulation): one that never finishes (a wrong passphrase tried
# again and again) does not hold the household's keys back longer.
RELOAD_WAIT_S = 5.0
RELOAD_POLL_S = 0.05


def reload_keys(ctrl: str, wait_s: float = RELOAD_WAIT_S) -> list[str]:
    """hostapd reads its key file again (`RELOAD_WPA_PSK`) once no station is amid joining (`joining`), or after
    `wait_s`: the stations still joining then, which it put off the air (they join again), are returned.

    hostapd 2.10 puts off the air, at that reload, every station whose PMK is no key of the new list for its
    MAC or for any (ctrl_iface.c, kick_mismatch_psk_sta_iter). One that has only authenticated has no PMK yet;
    one amid its 4-way handshake holds the list's first key that fits its MAC (`handshake_under_way`), often
    another device's. Read then, the file takes off the air a station joining at that moment: the likely cause of
    the slowed radio story's failure at the satellite (a station connected, its entry there emptied)."""
    started = time.monotonic()
    waited_for: set[str] = set()
    while (busy := joining(command(ctrl, "all_sta"))) and time.monotonic() < started + wait_s:
        waited_for.update(busy)
        time.sleep(RELOAD_POLL_S)
    if busy:
        LOG.warning("%s still joining after %g s: reading the key file puts them off the air", ", ".join(busy), wait_s)
    elif waited_for:
        LOG.info("the key file read again once %s had joined (%.0f ms)", ", ".join(sorted(waited_for)),
                 (time.monotonic() - started) * 1e3)  # fmt: skip
    request(ctrl, "RELOAD_WPA_PSK")
    return busy


def served_ssid(ctrl: str) -> str:
    """The network name hostapd serves (its GET_CONFIG's `ssid=`; "" without one, as on a wired port)."""
    for line in command(ctrl, "get_config").splitlines():
        if line.startswith("ssid="):
            return line.removeprefix("ssid=")
    return ""


class Events:
    """hostapd's event stream (its control socket, ATTACHed), for one callback; attached again when
    hostapd restarts (`on_attach` then runs, before any event). The callbacks run on this object's thread."""

    def __init__(
        self,
        ctrl: str,
        on_event: Callable[[str], None],
        keepalive_s: float = 10.0,
        on_attach: Callable[[], None] = lambda: None,
    ):
        self.ctrl, self.on_event, self.keepalive_s, self.on_attach = ctrl, on_event, keepalive_s, on_attach
        self.attached, self.stopped = threading.Event(), threading.Event()

    def run_forever(self) -> None:
        while not self.stopped.is_set():
            try:
                self._listen()
            except OSError as exc:
                LOG.debug("hostapd events from %s: %s; attaching again", self.ctrl, exc)
            self.attached.clear()
            self.stopped.wait(1)

    def stop(self) -> None:
        """Stop listening (within the keep-alive interval)."""
        self.stopped.set()

    def _listen(self) -> None:
        with _client_socket("events") as sock:
            self._attached_to(sock)

    def _attached_to(self, sock: socket.socket) -> None:
        sock.connect(self.ctrl)
        sock.settimeout(5)
        sock.send(b"ATTACH")
        if sock.recv(4096).strip() != b"OK":
            raise OSError("hostapd refused ATTACH")
        self.on_attach()
        self.attached.set()
        sock.settimeout(self.keepalive_s)
        waiting_for_pong = False
        while not self.stopped.is_set():
            try:
                message = sock.recv(4096).decode("utf-8", "replace").strip()
            except TimeoutError:
                if waiting_for_pong:
                    raise OSError("hostapd stopped answering") from None
                sock.send(b"PING")  # a restarted hostapd forgot us: notice it
                waiting_for_pong = True
                continue
            if message == "PONG":
                waiting_for_pong = False
            elif message.startswith("<"):
                self.on_event(message)


class Authenticator:
    """What hostapd is told of devices (denied, kicked off the air, forgotten), by one thread in the order the
    household decided, and its key file of devices' own passphrases, written by one caller at a time,
    each writing the router's latest keys (`keys`, which takes them under the controller's lock)."""

    def __init__(self, ctrl: str, psk_file: str, keys: Callable[[], list[wifi_keys.WifiKey]]):
        self.ctrl, self.psk_file, self.keys = ctrl, psk_file, keys
        self.jobs: queue.SimpleQueue[AuthenticatorWord] = queue.SimpleQueue()
        self.keys_lock = threading.Lock()

    def tell(self, effect: AuthenticatorWord) -> None:
        """Queued for the thread (`run_forever`); without a control socket, nobody to tell."""
        if self.ctrl:
            self.jobs.put(effect)

    def run_forever(self) -> None:
        while True:
            self._tell(self.jobs.get())

    def _tell(self, effect: AuthenticatorWord) -> None:
        if isinstance(effect, AuthenticatorForget):
            try:
                if not forget(self.ctrl, effect.mac):
                    LOG.info("%s roamed away but is still heard here: not forgotten", effect.mac)
            except HostapdError as exc:
                LOG.warning("forgetting %s: %s", effect.mac, exc)
            return
        for words in self._commands(effect):
            try:
                command(self.ctrl, *words)
            except HostapdError as exc:
                LOG.error("%s", exc)

    @staticmethod
    def _commands(effect: AuthenticatorDeny | AuthenticatorKick) -> list[list[str]]:
        match effect:
            case AuthenticatorKick():
                return [["deauthenticate", effect.mac]]
            case AuthenticatorDeny(deny=True):
                return [["deny_acl", "ADD_MAC", effect.mac], ["deauthenticate", effect.mac]]  # off the air now too
            case AuthenticatorDeny():
                return [["deny_acl", "DEL_MAC", effect.mac]]

    def publish_keys(self) -> dict:
        """hostapd's key file rewritten with the router's keys, and hostapd told to read it again (off the
        controller's lock). `applied`: hostapd has them; `note` says why not."""
        if not self.psk_file:
            return {"applied": False, "note": "no key file configured (--wifi-psk-file): the radio does not know it"}
        with self.keys_lock:
            keys = self.keys()
            try:
                before = private_files.read_text(self.psk_file)
                text = wifi_keys.render_psk_file(before, keys)
                # Unchanged (every start publishes): not written, so the router's watch on the file (which
                # renders hostapd's configuration again and restarts it) does not fire for nothing.
                if text != before:
                    private_files.write(self.psk_file, text)
            except OSError as exc:
                LOG.error("could not write %s: %s", self.psk_file, exc)
                return {"applied": False, "note": f"could not write the key file: {exc}"}
            if not self.ctrl:
                return {"applied": False, "note": "key file written; no hostapd socket to tell (--hostapd-ctrl)"}
            try:
                reload_keys(self.ctrl)
            except HostapdError as exc:
                LOG.error("%s", exc)
                return {"applied": False, "note": f"key file written; {exc}"}
        return {"applied": True, "note": ""}
