"""Render hostapd's configuration for the emulated home (wired) or a router's radio (nl80211).

    python -m homework_controller.hostapd_conf --driver wired --interface br-lan \
        --ctrl-dir /run/hostapd --eap-users /run/homenet/hostapd.eap_user > hostapd.conf
"""
from __future__ import annotations

import argparse
import string
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1] / "hostapd" / "hostapd.conf.in"


def driver_settings(args) -> str:
    if args.driver == "wired":
        # Unicast EAPOL to each device: on a shared segment the PAE group address would
        # send every device every other device's EAP exchange.
        return "\n".join(["ieee8021x=1", "eap_server=1", f"eap_user_file={args.eap_users}",
                          "use_pae_group_addr=0"])
    if not args.ssid or not args.passphrase or not 8 <= len(args.passphrase) <= 63:
        raise SystemExit("nl80211 needs --ssid and a --passphrase of 8 to 63 characters")
    return "\n".join([f"ssid={args.ssid}", "hw_mode=g", f"channel={args.channel}", "wpa=2",
                      "wpa_key_mgmt=WPA-PSK", "rsn_pairwise=CCMP", f"wpa_passphrase={args.passphrase}",
                      "ap_isolate=1"])  # stations reach each other only through the router


def render(args) -> str:
    return string.Template(TEMPLATE.read_text()).substitute(
        interface=args.interface, driver=args.driver, ctrl_dir=args.ctrl_dir,
        driver_settings=driver_settings(args))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--driver", choices=["wired", "nl80211"], required=True)
    p.add_argument("--interface", required=True)
    p.add_argument("--ctrl-dir", default="/run/hostapd")
    p.add_argument("--eap-users", help="wired: the internal EAP server's user file")
    p.add_argument("--ssid")
    p.add_argument("--passphrase")
    p.add_argument("--channel", type=int, default=6)
    args = p.parse_args(argv)
    if args.driver == "wired" and not args.eap_users:
        p.error("wired needs --eap-users")
    sys.stdout.write(render(args))


if __name__ == "__main__":
    main()
