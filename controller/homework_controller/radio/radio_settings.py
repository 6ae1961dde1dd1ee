"""The router's own radio, the household's settings: its network name, guest passphrase, country
(regulatory domain), band and channel. One model for everyone who reads or writes them: the image
(`homework_image.radio`: hostapd's configuration at boot and whenever the file changes),
`hostapd_conf` (which renders that configuration) and ws.v1 (`radio-settings`, `set-radio-settings`:
the household changes them in the web UI).

The file is `key=value` lines:

    ssid=Homework            the network's name
    passphrase=...           the shared (guest) passphrase
    country=00               the regulatory domain (ISO 3166-1, e.g. GB); 00, the world's, until chosen
    band=2.4                 2.4 or 5 (GHz)
    channel=6

A line that is not understood is reported and left out (the others still apply), and a change
written through ws.v1 keeps it where it was, so what the household's file said is never lost.
Writing the file is all it takes for a change to apply on the image: a path unit renders hostapd's
configuration again and restarts hostapd (every device joins again, in a few seconds).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..errors import ApiError, NotConfigured
from . import private_files

WORLD = "00"  # the world regulatory domain: the kernel's until the household chooses a country
BANDS = ("2.4", "5")  # GHz
# 20 MHz channels: 1-13 at 2.4 GHz (14 is Japan's, 802.11b only); at 5 GHz the common ones from
# 36 to 165 (which of them a country allows is the kernel's regulatory database's to say).
CHANNELS = {
    "2.4": tuple(range(1, 14)),
    "5": (36, 40, 44, 48, 52, 56, 60, 64, 100, 104, 108, 112, 116, 120, 124, 128, 132, 136, 140, 144)
    + (149, 153, 157, 161, 165),
}
# In the world domain only channels 1-11 may start a network (12 and 13 are listen-only, and all of 5 GHz).
WORLD_CHANNELS = tuple(range(1, 12))
DEFAULT_CHANNEL = {"2.4": 6, "5": 36}


@dataclass(frozen=True)
class RadioSettings:
    ssid: str = "Homework"
    passphrase: str = ""
    country: str = WORLD
    band: str = "2.4"
    channel: int = 6

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


FIELDS = tuple(f.name for f in fields(RadioSettings))
# What the radio cannot take while it runs: a change of any of these restarts it (every device joins again).
# The guest passphrase it takes at run time (homework_image.radio.refresh). The web UI reads this list to
# say, before the owner saves, which it will be.
RESTARTING_FIELDS = tuple(f for f in FIELDS if f != "passphrase")


class BadSettings(ApiError):
    """Settings refused, with each field's problem (ws.v1 answers them in `fields`)."""

    def __init__(self, problems: dict[str, str]):
        super().__init__("; ".join(f"{field}: {why}" for field, why in problems.items()), fields=problems)


def check_ssid(value: str) -> str:
    # One line of printable characters: the file and hostapd's configuration are lines.
    if not value.isprintable() or not 1 <= len(value.encode()) <= 32:
        raise ValueError("a network name is 1 to 32 bytes (UTF-8) of printable characters, on one line")
    return value


def check_passphrase(value: str) -> str:
    # WPA2: 8 to 63 printable ASCII (IEEE 802.11 Annex J). WPA3's SAE passwords end at `|` in hostapd's configuration.
    if not 8 <= len(value) <= 63 or any(not 32 <= ord(ch) <= 126 for ch in value):
        raise ValueError("a passphrase is 8 to 63 printable ASCII characters")
    if "|" in value:
        raise ValueError("a passphrase cannot contain `|` (WPA3 would end it there)")
    return value


def check_country(value: str) -> str:
    """`00` (the world domain) or an ISO 3166-1 alpha-2 code in capitals, such as `GB`."""
    if value != WORLD and not (len(value) == 2 and value.isascii() and value.isalpha() and value.isupper()):
        raise ValueError("a country is 00 (the world) or two letters (ISO 3166-1, e.g. GB)")
    return value


def check_band(value: str) -> str:
    if value not in BANDS:
        raise ValueError(f"a band is one of {', '.join(BANDS)} (GHz)")
    return value


def check_channel(value: str) -> int:
    """A channel number; whether the band and country allow it is `problems_together`'s to say."""
    if not value.isdigit() or int(value) not in CHANNELS["2.4"] + CHANNELS["5"]:
        raise ValueError("a channel is 1 to 13 (2.4 GHz) or one of 36 to 165 (5 GHz)")
    return int(value)


CHECKS: dict[str, Callable[[str], Any]] = {"ssid": check_ssid, "passphrase": check_passphrase, "country": check_country}
CHECKS |= {"band": check_band, "channel": check_channel}


def _as_setting(key: str, text: str) -> Any:
    """One setting's text as its value (a country in either case), or ValueError saying why not."""
    if key not in CHECKS:
        raise ValueError(f"unknown setting (known: {', '.join(FIELDS)})")
    return CHECKS[key](text.upper() if key == "country" else text)


def problems_together(settings: RadioSettings) -> dict[str, str]:
    """What the band, the channel and the country do not allow together, by the field to change."""
    if settings.band == "5" and settings.country == WORLD:
        return {"band": "5 GHz needs a country: in the world domain (00) no 5 GHz channel may start a network"}
    channel, allowed = settings.channel, CHANNELS[settings.band]
    if channel not in allowed:
        return {"channel": f"channel {channel} is not a {settings.band} GHz channel ({allowed[0]}-{allowed[-1]})"}
    if settings.country == WORLD and channel not in WORLD_CHANNELS:
        return {"channel": f"channel {channel} needs a country: in the world domain (00) only 1-11 may be used"}
    return {}


def parse(text: str, source: str = "") -> tuple[RadioSettings, list[str]]:
    """The settings `text` gives (defaults for the rest) and one message per line left out.

    Band, channel and country that do not go together fall back to the band's default channel
    (5 GHz without a country to 2.4 GHz), and say so."""
    settings, problems = RadioSettings(), []
    where = f"{source} " if source else ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        try:
            if not sep:
                raise ValueError("expected key=value")
            settings = replace(settings, **{key.strip(): _as_setting(key.strip(), value.strip())})
        except ValueError as exc:
            # The key, never the value: a passphrase's problem is shown in the web UI and logged.
            problems.append(f"{where}line {number} ({key.strip()[:32]}): {exc}; left out")
    clash = problems_together(settings)
    if clash:
        band = settings.band if settings.country != WORLD else "2.4"
        settings = replace(settings, band=band, channel=DEFAULT_CHANNEL[band])
        why = ", ".join(clash.values())
        problems.append(f"{where.strip() or 'settings'}: {why}; {band} GHz channel {settings.channel} instead")
    return settings, problems


def changed(settings: RadioSettings, changes: object) -> RadioSettings:
    """`settings` with the household's changes (a JSON object: any of FIELDS), all of it checked
    together; BadSettings names every field refused."""
    if not isinstance(changes, dict):
        raise BadSettings({"settings": f"send a JSON object of {', '.join(FIELDS)}"})
    problems: dict[str, str] = {}
    values: dict[str, Any] = {}
    for key, value in changes.items():
        if key not in FIELDS:
            problems[str(key)] = f"not a setting (known: {', '.join(FIELDS)})"
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            problems[key] = "a text or a number"
        elif isinstance(value, str) and value != value.strip():
            problems[key] = "starts or ends with a space, which the file would not keep"
        else:
            try:
                values[key] = _as_setting(key, str(value))
            except ValueError as exc:
                problems[key] = str(exc)
    result = replace(settings, **values)
    for key in FIELDS:  # a setting the file lacks (a guest passphrase) is needed all the same
        if key not in problems:
            try:
                _as_setting(key, str(getattr(result, key)))
            except ValueError as exc:
                problems[key] = str(exc)
    if not problems.keys() & {"band", "channel", "country"}:
        problems |= problems_together(result)
    if problems:
        raise BadSettings(problems)
    return result


def render(settings: RadioSettings, current: str = "") -> str:
    """The file for `settings`: `current`'s lines in their order, each setting's line replaced by its
    value (a setting said twice, once), lines that are not settings kept as they were, and the
    settings `current` lacks added at the end."""
    lines, said = [], set()
    for raw in current.splitlines():
        key = raw.partition("=")[0].strip()
        if key in FIELDS and "=" in raw and not raw.strip().startswith("#"):
            if key not in said:
                lines.append(f"{key}={getattr(settings, key)}")
                said.add(key)
        else:
            lines.append(raw)
    lines += [f"{key}={getattr(settings, key)}" for key in FIELDS if key not in said]
    return "".join(f"{line}\n" for line in lines)


NO_RADIO = "this router has no radio of its own"
RESTARTS = "the radio restarts with these settings: every device joins again within a few seconds"
NEW_GUEST_PASSPHRASE = (
    "the new guest passphrase works now: devices that joined with the old one are off the air until they"
    " join with the new one; devices with a passphrase of their own stay on (or reconnect by themselves)"
)


class RadioSettingsFile:
    """ws.v1's side: the settings file read and changed by one caller at a time, under a lock of its
    own (file I/O, never under the controller's). path "": the router has no radio (501)."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()

    def _read(self) -> str:
        # The image makes the file when it first serves a radio: until then there is none to set.
        if not self.path:
            raise NotConfigured(f"{NO_RADIO} (the controller has no --radio-settings)")
        try:
            with open(self.path) as f:
                return f.read()
        except FileNotFoundError:
            raise NotConfigured(f"{NO_RADIO} (no {self.path})") from None

    def radio_settings(self) -> dict:
        """The settings (the guest passphrase too: only the owner's page reads them), the lines left out,
        the channels each band has (`world_channels`: all the world domain allows), for a form to offer, and
        which settings restart the radio when changed (`restarts`)."""
        with self._lock:
            settings, problems = parse(self._read(), self.path)
        return {
            **settings.as_dict(),
            "problems": problems,
            "channels": CHANNELS,
            "world_channels": WORLD_CHANNELS,
            "restarts": RESTARTING_FIELDS,
        }

    def set_radio_settings(self, changes: object) -> dict:
        """The settings changed as asked, written (the radio restarts with them when they differ)."""
        with self._lock:
            current = self._read()
            before, _ = parse(current, self.path)
            after = changed(before, changes)
            text = render(after, current)
            if text != current:
                private_files.write(self.path, text)  # it holds the guest passphrase: 0600
            _, problems = parse(text, self.path)
        restarting = any(getattr(after, f) != getattr(before, f) for f in RESTARTING_FIELDS)
        message = RESTARTS if restarting else NEW_GUEST_PASSPHRASE if after != before else "nothing changed"
        return {**after.as_dict(), "problems": problems, "restarting": restarting, "message": message}
