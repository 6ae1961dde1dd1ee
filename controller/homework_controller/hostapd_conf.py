"""Render hostapd's configuration for the emulated home (wired) or a router's radio (nl80211).

    python -m homework_controller.hostapd_conf --driver wired --interface br-lan \
        --ctrl-dir /run/hostapd --eap-users /run/homenet/hostapd.eap_user > hostapd.conf

    python -m homework_controller.hostapd_conf --driver nl80211 --interface wlan0 --ssid Home \
        --passphrase 'the guest passphrase' --psk-file /var/lib/homework/hostapd.wpa_psk > hostapd.conf

On a radio, management frames are protected (802.11w, PMF) for every device that can
(`--pmf optional`, the default) or required of all (`--pmf required`: older devices cannot
join). With `--psk-file`, the guest passphrase is the file's wildcard line (`keyid=guest`) and
the controller adds each device's own passphrase to the same file (`--wifi-psk-file`).
"""

from __future__ import annotations

import argparse
import string
import sys
from pathlib import Path

from . import wifi_keys

TEMPLATE = Path(__file__).resolve().parents[1] / "hostapd" / "hostapd.conf.in"
PMF = {"optional": 1, "required": 2}  # hostapd's ieee80211w


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
    if "\n" in args.ssid or not 1 <= len(args.ssid.encode()) <= 32:
        raise SystemExit("--ssid is 1 to 32 bytes on one line")
    # WPA-PSK-SHA256 is the AKM a PMF-capable device negotiates; WPA-PSK keeps older ones joining
    # (with ieee80211w=2 they cannot: they do not do PMF). No SAE (WPA3): hostapd's SAE does not
    # read wpa_psk_file, so a WPA3 device would join with the shared passphrase only, and the
    # per-device passphrases are what tells a device from a copy of its MAC (see docs/SECURITY.md).
    settings = [
        f"ssid={args.ssid}",
        "utf8_ssid=1",
        "hw_mode=g",
        f"channel={args.channel}",
        "wpa=2",
        "wpa_key_mgmt=WPA-PSK WPA-PSK-SHA256",
        "rsn_pairwise=CCMP",
        f"ieee80211w={PMF[args.pmf]}",
        "ap_isolate=1",
    ]  # stations reach each other only through the router
    if args.psk_file:
        path = Path(args.psk_file)
        try:
            wifi_keys.write_psk_file(
                str(path), wifi_keys.render_guest_line(wifi_keys.read_text(str(path)), args.passphrase)
            )
        except OSError as exc:
            raise SystemExit(f"--psk-file {path}: {exc}") from None
        settings.append(f"wpa_psk_file={path}")
    else:
        settings.append(f"wpa_passphrase={args.passphrase}")
    return "\n".join(settings)


def render(args) -> str:
    return string.Template(TEMPLATE.read_text()).substitute(
        interface=args.interface, driver=args.driver, ctrl_dir=args.ctrl_dir, driver_settings=driver_settings(args)
    )


def main(argv=None):
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
    args = p.parse_args(argv)
    if args.driver == "wired" and not args.eap_users:
        p.error("wired needs --eap-users")
    sys.stdout.write(render(args))


if __name__ == "__main__":
    main()
