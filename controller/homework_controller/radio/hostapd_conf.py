"""Render hostapd's configuration for the emulated home (wired) or a router's radio (nl80211).

    python -m homework_controller.radio.hostapd_conf --driver wired --interface br-lan \
        --ctrl-dir /run/hostapd --eap-users /run/homenet/hostapd.eap_user > hostapd.conf

    python -m homework_controller.radio.hostapd_conf --driver nl80211 --interface wlan0 --ssid Home \
        --passphrase 'the guest passphrase' --psk-file /var/lib/homework/hostapd.wpa_psk > hostapd.conf

On a radio, management frames are protected (802.11w, PMF) for every device that can
(`--pmf optional`, the default) or required of all (`--pmf required`: older devices cannot
join). With `--psk-file`, the guest passphrase is the file's wildcard line (`keyid=guest`) and
the controller adds each device's own passphrase to the same file (`--wifi-psk-file`).

`--security wpa2-wpa3` (the default) adds WPA3-SAE in transition mode: WPA3 devices join with
SAE (PMF required of them), older ones with WPA2. hostapd's SAE does not read wpa_psk_file, so
each device line of the key file becomes an `sae_password=...|mac=MAC` line (the MAC its key id
names), tried before the guest one: for a device's MAC hostapd takes the device's own password, so
a copy of that MAC cannot join with the guest password over SAE either. hostapd reports no key id
for an SAE join; the controller reads which password the configuration binds to the station's
MAC (`sae_bindings`, its --hostapd-conf). A device key added later, or a device back under a new
MAC, reaches SAE when the configuration is rendered again and its passwords given to the running
hostapd (on the image, a path unit on the key file does both: `homework_image.radio`). Until then
such a device joins with its own passphrase over WPA2 only: SAE cannot try several passwords on one
handshake, and phones send no SAE password identifier.

`--country` is the regulatory domain: `00` (the world domain, the kernel's default until the
household chooses) is not advertised; a country is, with 802.11d. 5 GHz, and channels 12 and 13,
need a country: in the world domain they may not start a network. The settings are checked as the
household's settings file is (`radio_settings`).
"""

from __future__ import annotations

import argparse
import string
import sys
from pathlib import Path

from ..policy import wifi_keys
from . import private_files, radio_settings

TEMPLATE = Path(__file__).resolve().parents[2] / "hostapd" / "hostapd.conf.in"
PMF = {"optional": 1, "required": 2}  # hostapd's ieee80211w
SA_QUERY_MAX_TU, SA_QUERY_RETRY_TU = 200, 50  # hostapd's defaults: 1000 and 201 (why: driver_settings)
HW_MODE = {"2.4": "g", "5": "a"}  # band (GHz) -> hostapd's hw_mode
WORLD = radio_settings.WORLD
SAE_MAC = "mac="  # an sae_password line's option binding it to one station


def sae_password_lines(psk_file_text: str, guest: str) -> list[str]:
    """hostapd's sae_password lines: the guest's, then each device line of the key file bound to its MAC.

    hostapd puts each line it reads at the head of its list and takes the first entry that fits a
    station, so the last line is tried first: the device lines come after the guest's."""
    lines = []
    for line in psk_file_text.splitlines():
        if line.startswith(f"keyid={wifi_keys.DEVICE_KEYID_PREFIX}"):
            keyid, _wildcard, passphrase = line.split(" ", 2)
            mac = wifi_keys.mac_of_keyid(keyid.removeprefix("keyid="))
            if mac is not None:
                lines.append(f"sae_password={sae_password(passphrase)}|{SAE_MAC}{mac}")
    return [f"sae_password={sae_password(guest)}", *lines]


def sae_bindings(conf_text: str) -> dict[str, str]:
    """MAC -> the SAE password a configuration binds to it (its `sae_password=...|mac=` lines)."""
    bound = {}
    for line in conf_text.splitlines():
        password, sep, mac = line.removeprefix("sae_password=").rpartition(f"|{SAE_MAC}")
        if line.startswith("sae_password=") and sep:
            bound[mac.strip().lower()] = password
    return bound


def sae_password(passphrase: str) -> str:
    # hostapd ends the password at the first `|` (what follows are its options).
    if "|" in passphrase:
        raise ValueError("with WPA3 (SAE) a passphrase cannot contain `|`")
    return passphrase


def driver_settings(args) -> str:
    if args.driver == "wired":
        # Unicast EAPOL to each device: on a shared segment the PAE group address would
        # send every device every other device's EAP exchange.
        return "\n".join(["ieee8021x=1", "eap_server=1", f"eap_user_file={args.eap_users}", "use_pae_group_addr=0"])
    if not args.ssid:
        raise SystemExit("nl80211 needs --ssid")
    try:
        wifi_keys.check_passphrase(args.passphrase or "")
    except wifi_keys.BadPassphrase as exc:
        raise SystemExit(f"nl80211 needs --passphrase: {exc}") from None
    # The radio settings' own checks (radio_settings), but for the passphrase: `|` is WPA3's alone to refuse.
    for option, check, value in (
        ("--ssid", radio_settings.check_ssid, args.ssid),
        ("--country", radio_settings.check_country, args.country),
        ("--channel", radio_settings.check_channel, str(args.channel)),
    ):
        try:
            check(value)
        except ValueError as exc:
            raise SystemExit(f"{option}: {exc}, not {value!r}") from None
    country = args.country
    together = radio_settings.RadioSettings(args.ssid, args.passphrase, country, args.band, args.channel)
    clash = radio_settings.problems_together(together)
    if clash:
        field, why = next(iter(clash.items()))
        raise SystemExit(f"--{field}: {why}")
    wpa3 = args.security == "wpa2-wpa3"
    # WPA-PSK-SHA256 is the AKM a PMF-capable device negotiates; WPA-PSK keeps older ones joining
    # (with ieee80211w=2 they cannot: they do not do PMF). SAE (WPA3) always protects management
    # frames (sae_require_mfp), whatever --pmf asks of WPA2 devices.
    settings = [
        f"ssid={args.ssid}",
        "utf8_ssid=1",
        f"hw_mode={HW_MODE[args.band]}",
        f"channel={args.channel}",
        "ieee80211n=1",
        "wmm_enabled=1",
        *([f"country_code={country}", "ieee80211d=1"] if country != WORLD else []),
        "wpa=2",
        "wpa_key_mgmt=WPA-PSK WPA-PSK-SHA256" + (" SAE" if wpa3 else ""),
        "rsn_pairwise=CCMP",
        f"ieee80211w={PMF[args.pmf]}",
        # A station that roams away does not tell the access point it leaves, so when it comes back that
        # access point still holds its protected association: it asks the old one with SA Query and refuses
        # the new one "temporarily" for this long (TU), twice at hostapd's 1000 (a roam's gap was 2.1 s). A
        # station that is really there answers in milliseconds; a forged association still cannot end it.
        f"assoc_sa_query_max_timeout={SA_QUERY_MAX_TU}",
        f"assoc_sa_query_retry_timeout={SA_QUERY_RETRY_TU}",
        *(["sae_require_mfp=1"] if wpa3 else []),
        # Stations reach each other only through the router, and each gets its multicast and
        # broadcast as unicast frames (the switch's rules decide who receives which).
        "ap_isolate=1",
        "multicast_to_unicast=1",
        # A satellite's radio is a port of the bridge onto its cable (the router's switch is the only way
        # between its stations); the router's own radio is a port of the router's switch, added by the image.
        *([f"bridge={args.bridge}"] if args.bridge else []),
    ]
    key_file = ""
    if args.psk_file:
        path = Path(args.psk_file)
        try:
            current = private_files.read_text(str(path))
            key_file = wifi_keys.render_guest_line(current, args.passphrase)
            if key_file != current:  # a write would wake what watches the file (the image's path unit)
                private_files.write(str(path), key_file)
        except OSError as exc:
            raise SystemExit(f"--psk-file {path}: {exc}") from None
        settings.append(f"wpa_psk_file={path}")
    else:
        settings.append(f"wpa_passphrase={args.passphrase}")
    if wpa3:
        try:
            settings += sae_password_lines(key_file, args.passphrase)
        except ValueError as exc:
            raise SystemExit(f"--passphrase: {exc}") from None
    return "\n".join(settings)


def render(args) -> str:
    return string.Template(TEMPLATE.read_text()).substitute(
        interface=args.interface, driver=args.driver, ctrl_dir=args.ctrl_dir, driver_settings=driver_settings(args)
    )


def main(argv=None):
    sys.stdout.write(conf_from(argv))


def conf_from(argv=None) -> str:
    """The configuration for this command line (SystemExit with the reason for a setting it refuses)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--driver", choices=["wired", "nl80211"], required=True)
    p.add_argument("--interface", required=True)
    p.add_argument("--ctrl-dir", default="/run/hostapd")
    p.add_argument("--eap-users", help="wired: the internal EAP server's user file")
    p.add_argument("--ssid")
    p.add_argument("--passphrase", help="nl80211: the shared (guest) passphrase, 8 to 63 printable ASCII characters")
    p.add_argument(
        "--psk-file",
        help="nl80211: hostapd's wpa_psk_file; its guest line is (re)written with "
        "--passphrase, the controller's device lines are kept",
    )
    p.add_argument(
        "--pmf",
        choices=sorted(PMF),
        default="optional",
        help="nl80211: protected management frames (802.11w) for devices that can, or required of all",
    )
    p.add_argument("--channel", type=int, default=6)
    p.add_argument("--band", choices=sorted(HW_MODE), default="2.4", help="nl80211: the band, in GHz")
    p.add_argument(
        "--country", default=WORLD, help="nl80211: the regulatory domain (ISO 3166-1 alpha-2); 00, the world's"
    )
    p.add_argument("--bridge", help="nl80211: the Linux bridge hostapd makes the radio a port of (a satellite's)")
    p.add_argument(
        "--security",
        choices=["wpa2", "wpa2-wpa3"],
        default="wpa2-wpa3",
        help="nl80211: WPA2-PSK only, or WPA3-SAE beside it (transition mode, per-device SAE passwords)",
    )
    args = p.parse_args(argv)
    if args.driver == "wired" and not args.eap_users:
        p.error("wired needs --eap-users")
    return render(args)


if __name__ == "__main__":
    main()
