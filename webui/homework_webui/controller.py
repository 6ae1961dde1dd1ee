"""Client for the controller's loopback ws.v1 JSON API.

Every call says whom it acts for (`ROLE_HEADER`): the controller decides who may do what, in one table
(homework_controller/api/authority.py), and answers a refusal with 403 and its reason. The web UI keeps its
sign-in, CSRF and which member owns which device; it does not restate the controller's table."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from flask import g, has_request_context

ROLE_HEADER = "X-Homework-Role"  # the controller's authority.HEADER
# The web UI's account roles as the controller's table names them (authority.ROLES).
CONTROLLER_ROLES = {"owner": "owner", "member": "member", "kiosk": "panel", "satellite": "satellite"}
OWNER, PANEL, DEVICE, SATELLITE = "owner", "panel", "device", "satellite"


def seen_by(devices: list[dict], role: str, account_id: int) -> list[dict]:
    """The devices (with their owners, `owner_id`) as a session of the web UI's `role` sees them: each one's
    `may` (the controller's, for every role: what its table lets each do to the device now) is that role's
    alone. A member's is only for the devices they own: the controller grants a member what it grants for
    their own devices (authority.py's MEMBER), and the web UI alone knows which those are (`own_device`).
    A device the controller has not described (a joiner just heard of, one only heard over the air) offers
    nothing yet."""
    shown = []
    for device in devices:
        may = (device.get("may") or {}).get(CONTROLLER_ROLES[role], [])
        shown.append(dict(device, may=may if acts_on(role, device.get("owner_id"), account_id) else []))
    return shown


def acts_on(role: str, owner_id: int | None, account_id: int) -> bool:
    """Whether a session of the web UI's `role` (account `account_id`) may act on a device owned by `owner_id`
    at all: a member on their own devices alone, anyone else on any."""
    return role != "member" or owner_id == account_id


def request_role() -> str:
    """Whom a ws.v1 call made while serving a request acts for: the signed-in account, or else the device
    the request comes from (the captive portal's); outside a request, a device too (the least)."""
    user = g.get("user") if has_request_context() else None
    return CONTROLLER_ROLES[user["role"]] if user else DEVICE


class ControllerDownError(Exception):
    """The controller did not answer (not running, restarting, or hung). `unconfirmed`: a change was sent
    and its answer did not come in time, so the controller may still carry it out."""

    def __init__(self, message: str, unconfirmed: bool = False):
        super().__init__(message)
        self.unconfirmed = unconfirmed


# How long an answer may take. A change (POST) is given longer than a read: the household pressed a
# button and waits for it, and on a slow router (or one busy with a storm) a change that is on the disk
# before its answer takes seconds; told "not answering" after 3 s, the household saw the permit it had
# just made refused (the image's boot stories on a loaded machine did).
READ_TIMEOUT_S, CHANGE_TIMEOUT_S = 5.0, 30.0


class ControllerError(Exception):
    """details: what the controller said beside its message (e.g. `fields`, each refused setting's why)."""

    def __init__(self, status: int, message: str, details: dict | None = None):
        super().__init__(message)
        self.status, self.details = status, details or {}


class ControllerClient:
    def __init__(
        self,
        base_url: str,
        timeout: float = READ_TIMEOUT_S,
        role_of: Callable[[], str] = request_role,
        change_timeout: float = CHANGE_TIMEOUT_S,
    ):
        """role_of: whom each call acts for (`ROLE_HEADER`); timeout: a read's, change_timeout: a change's."""
        self.base_url, self.timeout, self.role_of, self.change_timeout = base_url, timeout, role_of, change_timeout
        self.base = base_url.rstrip("/") + "/ws.v1/"

    def acting_as(self, role: str) -> ControllerClient:
        """The same controller, every call acting for `role` (the live board's own reads: the wall panel's)."""
        return ControllerClient(self.base_url, self.timeout, lambda: role, self.change_timeout)

    def _call(self, verb: str, path: str, query: dict | None = None, body: dict | None = None):
        """body: a JSON object, for the operations that take one (a passphrase never goes in a URL)."""
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else b"" if verb == "POST" else None
        headers = {"Content-Type": "application/json", ROLE_HEADER: self.role_of()}
        req = urllib.request.Request(url, method=verb, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.change_timeout if verb == "POST" else self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                details = json.loads(exc.read())
                message = details.pop("error", None) or exc.reason
            except (ValueError, AttributeError):
                details, message = {}, str(exc.reason)
            raise ControllerError(exc.code, message, details if isinstance(details, dict) else {}) from None
        except TimeoutError as exc:  # connected and sent, no answer in time
            raise ControllerDownError(str(exc), unconfirmed=verb == "POST") from None
        except (OSError, ValueError) as exc:  # refused, reset, garbage
            raise ControllerDownError(str(exc)) from None

    @staticmethod
    def _mac(mac: str) -> str:
        return urllib.parse.quote(mac, safe="")

    def status(self) -> list[dict]:
        return self._call("GET", "status")

    def device(self, mac: str) -> dict:
        return self._call("GET", f"status/{self._mac(mac)}")

    def decide(self, action: str, mac: str) -> dict:
        assert action in ("permit", "deny", "whitelist", "blacklist")
        return self._call("POST", f"{action}/{self._mac(mac)}")

    def merge(self, mac: str, into: str) -> dict:
        """The newcomer at `mac` is the device `into` back under a new MAC (offered as `looks_like`):
        answers its status under `mac`, with everything the household said about `into`."""
        return self._call("POST", f"merge/{self._mac(mac)}/{self._mac(into)}")

    def give_route(self, mac: str, prefix: str) -> dict:
        """A route's prefix (a Thread mesh's) gets a new owner, the device at `mac`: another device's
        offer of it is refused from now on. Answers the device's status."""
        return self._call("POST", f"route-owner/{self._mac(mac)}", {"prefix": prefix})

    def rename(self, mac: str, name: str) -> dict:
        return self._call("POST", f"name/{self._mac(mac)}", {"name": name})

    def pause(self, mac: str) -> dict:
        """The device's traffic stops now, until resumed; answers its status (`paused`)."""
        return self._call("POST", f"pause/{self._mac(mac)}")

    def resume(self, mac: str) -> dict:
        return self._call("POST", f"resume/{self._mac(mac)}")

    def set_internet_only(self, mac: str, on: bool) -> dict:
        """The device reaches the internet and the router only, never another device (on), or other devices
        too again; answers its status (`internet_only`)."""
        return self._call("POST", f"{'internet-only' if on else 'lan-access'}/{self._mac(mac)}")

    def pause_for(self, mac: str, duration: str) -> dict:
        """Paused now for minutes ("30", "1 h") or until "tomorrow" (the household's reset)."""
        return self._call("POST", f"pause-for/{self._mac(mac)}/{urllib.parse.quote(duration, safe='')}")

    def set_schedule(self, mac: str, windows: str) -> dict:
        """The device's weekly bedtime ("sun-thu 21:30-07:00"; empty clears it); answers its status."""
        return self._call("POST", f"schedule/{self._mac(mac)}", {"windows": windows})

    def set_allowance(self, mac: str, amount: str) -> dict:
        """The device's daily allowance ("2 h", "500 MB"; empty removes it); answers its status."""
        return self._call("POST", f"allowance/{self._mac(mac)}", {"amount": amount})

    def grant_bonus(self, mac: str, amount: str) -> dict:
        return self._call("POST", f"bonus/{self._mac(mac)}", {"amount": amount})

    # A shared allowance: one daily allowance several devices use together (a person's devices).

    def shared_allowance(self, name: str) -> dict:
        """Its standing today and the devices sharing it (404: there is none)."""
        return self._call("GET", f"shared-allowances/{self._mac(name)}")

    def set_shared_allowance(self, name: str, amount: str) -> dict | None:
        """Its amount ("2 h", "5 GB"; empty removes it: answers None)."""
        return self._call("POST", f"shared-allowance/{self._mac(name)}", {"amount": amount})

    def share_allowance(self, name: str, macs: list[str]) -> dict:
        """The devices that share it (replacing those that did); those the router has not seen are left out."""
        return self._call("POST", f"share-allowance/{self._mac(name)}", {"devices": ",".join(macs)})

    def grant_shared_bonus(self, name: str, amount: str) -> dict:
        return self._call("POST", f"shared-bonus/{self._mac(name)}", {"amount": amount})

    def household_time(self) -> dict:
        return self._call("GET", "household-time")

    def set_time_zone(self, zone: str) -> dict:
        return self._call("POST", "time-zone", {"zone": zone})

    def set_reset_time(self, at: str) -> dict:
        return self._call("POST", "reset-time", {"at": at})

    def portal(self, ip: str) -> dict:
        """What the captive portal tells the device at this address (a request's source) about itself:
        {captive, reason, code, paused_until, allowance, user_portal_url}."""
        return self._call("GET", f"portal/{urllib.parse.quote(ip, safe='')}")

    def satellite_keys(self) -> dict:
        """What a satellite access point serves the network with: {ssid, passphrase, country, band, channel,
        keys: [{mac, keyid, passphrase}], version} (the satellite role's alone)."""
        return self._call("GET", "satellite-keys")

    def satellite_station(self, ip: str, event: str, mac: str, keyid: str) -> dict:
        """The satellite at `ip` (a request's source address) says a station joined it with `keyid` or left it:
        {mac, event, port, access_port, applied} (the satellite role's alone)."""
        quoted = "/".join(urllib.parse.quote(part, safe="") for part in (ip, event, mac))
        return self._call("POST", f"satellite-station/{quoted}", {"keyid": keyid})

    def satellite_links(self, ip: str, links: list[dict]) -> dict:
        """The satellite at `ip` reports its stations' links ({mac, rssi, retries, packets} each): {logged,
        roamed_away, applied}; only those of stations at its own port are logged, and those bound at another
        access point since are named to forget (the satellite role's alone)."""
        return self._call("POST", f"satellite-links/{urllib.parse.quote(ip, safe='')}", body={"links": links})

    def dns_rules(self, mac: str):
        return self._call("GET", f"dns-rules/{self._mac(mac)}")

    def dns(self, action: str, mac: str, domain: str):
        assert action in ("deny-dns", "permit-dns")
        return self._call("POST", f"{action}/{self._mac(mac)}/{urllib.parse.quote(domain, safe='')}")

    # A device's own Wi-Fi passphrase. The answers carry the passphrase: never log them.

    def issue_wifi_key(self, mac: str) -> dict:
        """A new passphrase of the device's own (replacing its old one), with its QR text and
        whether hostapd took it: {mac, keyid, ssid, passphrase, qr, created, applied, note}."""
        return self._call("POST", f"wifi-key/{self._mac(mac)}")

    def show_wifi_key(self, mac: str) -> dict:
        return self._call("GET", f"show-wifi-key/{self._mac(mac)}")

    def revoke_wifi_key(self, mac: str) -> dict:
        return self._call("POST", f"revoke-wifi-key/{self._mac(mac)}")

    # The router's own radio. The answers carry the guest passphrase: never log them.

    def radio_settings(self) -> dict:
        """{ssid, passphrase, country, band, channel, problems}: 501 when the router has no radio."""
        return self._call("GET", "radio-settings")

    def set_radio_settings(self, settings: dict) -> dict:
        """Any of the settings, checked together (400: `fields` says why each was refused); the radio
        restarts with them: {..., restarting, message}."""
        return self._call("POST", "set-radio-settings", body=settings)

    def health(self) -> dict:
        return self._call("GET", "health")

    def apps(self) -> list[dict]:
        """Each app the router knows with the priority its flows get: [{app, priority, set_by}]."""
        return self._call("GET", "apps")

    def counters(self) -> dict:
        return self._call("GET", "counters")
