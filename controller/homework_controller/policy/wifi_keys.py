"""Per-device Wi-Fi passphrases: made, written for hostapd, and shown as a QR code. Pure (`private_files` writes them).

hostapd's `wpa_psk_file` holds one line per key: `keyid=ID MAC PASSPHRASE`; MAC
00:00:00:00:00:00 is a wildcard any station may use. hostapd tries each wildcard line in
turn until one fits the station's handshake, and reports which (`AP-STA-CONNECTED MAC
keyid=ID`). The household's shared guest passphrase is line `keyid=guest ...` (written by
`hostapd_conf`). The controller owns the lines whose keyid starts with `dev-`, one per device
that has its own passphrase, and keeps every other line as it finds it.

A device's line is a wildcard too, and its key id names the device's MAC (`dev-` and the MAC's
twelve hex digits): a phone that comes back under a new private address joins with its own
passphrase, and the key id says which device it is (the controller moves the device's record
to the new MAC and writes the line again with it). A station using a device's MAC with the
guest passphrase is told apart from the device itself the same way.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

from ..model import BadMac, normalize_mac

# No 0/o, 1/l/i: a passphrase read off a screen and typed on a phone.
ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"
GROUPS, GROUP_LEN = 5, 4
# WPA2-PSK lets whoever records a handshake guess offline (PBKDF2-SHA1, 4096 rounds: a few
# million guesses per second per GPU). ~99 bits: a thousand GPUs for a century try under 2^63.
PASSPHRASE_BITS = GROUPS * GROUP_LEN * math.log2(len(ALPHABET))
GUEST_KEYID = "guest"
DEVICE_KEYID_PREFIX = "dev-"
WILDCARD_MAC = "00:00:00:00:00:00"


class BadPassphrase(ValueError):
    pass


@dataclass(frozen=True)
class WifiKey:
    mac: str
    passphrase: str
    created: float
    # When the device first joined with it (0: not yet). Until then the device is on the guest passphrase
    # (or its earlier one) by right: it keeps that connection until it switches, and is no copy for it.
    used: float = 0.0

    @property
    def keyid(self) -> str:
        return device_keyid(self.mac)


def device_keyid(mac: str) -> str:
    """hostapd's name for a device's key (at most 32 characters, no spaces)."""
    return DEVICE_KEYID_PREFIX + normalize_mac(mac).replace(":", "")


def mac_of_keyid(keyid: str) -> str | None:
    """The MAC a device's key id names (None for the guest's or any other key id)."""
    digits = keyid.removeprefix(DEVICE_KEYID_PREFIX)
    if digits == keyid or len(digits) != 12 or not all(c in "0123456789abcdef" for c in digits):
        return None
    try:
        return normalize_mac(":".join(digits[i : i + 2] for i in range(0, 12, 2)))
    except BadMac:
        return None  # a group address: no device's


def new_passphrase() -> str:
    """Five groups of four from a 31-letter alphabet, e.g. `k7qm-3xhv-...`: ~99 bits from `secrets`."""
    return "-".join("".join(secrets.choice(ALPHABET) for _ in range(GROUP_LEN)) for _ in range(GROUPS))


def check_passphrase(passphrase: str) -> str:
    """A WPA2 passphrase: 8 to 63 printable ASCII characters (IEEE 802.11 Annex J)."""
    if not 8 <= len(passphrase) <= 63 or any(not 32 <= ord(ch) <= 126 for ch in passphrase):
        raise BadPassphrase("a WPA2 passphrase is 8 to 63 printable ASCII characters")
    return passphrase


def _escape_qr(text: str) -> str:
    # The Wi-Fi QR format (ZXing's MECARD-like syntax) escapes \ ; , : and " with a backslash.
    return "".join("\\" + ch if ch in '\\;,:"' else ch for ch in text)


def qr_payload(ssid: str, passphrase: str) -> str:
    """What a phone's camera reads to join: `WIFI:T:WPA;S:<ssid>;P:<passphrase>;;`."""
    return f"WIFI:T:WPA;S:{_escape_qr(ssid)};P:{_escape_qr(passphrase)};;"


def psk_line(keyid: str, mac: str, passphrase: str) -> str:
    return f"keyid={keyid} {mac} {check_passphrase(passphrase)}"


def render_psk_file(current: str, keys: list[WifiKey]) -> str:
    """`current` with its device lines replaced by `keys` (guest and other lines kept, in front)."""
    kept = [
        line for line in current.splitlines() if line.strip() and not line.startswith(f"keyid={DEVICE_KEYID_PREFIX}")
    ]
    lines = kept + [psk_line(k.keyid, WILDCARD_MAC, k.passphrase) for k in sorted(keys, key=lambda k: k.mac)]
    return "".join(line + "\n" for line in lines)


def render_guest_line(current: str, passphrase: str) -> str:
    """`current` with its guest (wildcard) line set to passphrase; device lines kept."""
    kept = [line for line in current.splitlines() if line.strip() and not line.startswith(f"keyid={GUEST_KEYID} ")]
    return "".join(line + "\n" for line in [psk_line(GUEST_KEYID, WILDCARD_MAC, passphrase), *kept])
