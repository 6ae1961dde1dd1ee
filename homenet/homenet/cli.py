"""homenet: the emulated home network around a Homework router (a thin layer over `Home`).

homenet up | down | status [--json] | restart SERVICE | setup-code
homenet client add NAME [--mac MAC] [--8021x ID:PW] | del NAME | exec NAME -- CMD... | dhcp NAME [--release]
homenet client auth NAME [--status] | radio NAME [--rssi DBM] [--retries N]
homenet router exec -- CMD...
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import radio
from .home import HWDB_BIN, WEBUI_URL, Home
from .services import HomenetError


def _strip_dashes(cmd: list[str]) -> list[str]:
    cmd = cmd[1:] if cmd and cmd[0] == "--" else cmd
    if not cmd:
        raise HomenetError("no command given (usage: ... -- CMD ARGS...)")
    return cmd


def _print_status(home: Home, as_json: bool) -> None:
    report = home.status()
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"Open vSwitch: {'running' if report['ovs'] else 'stopped'}; br-lan: "
        f"{'present' if report['bridge'] else 'absent'}"
    )
    for name in home.services:
        s = report[name]
        print(f"{name}: {'ready' if s['ready'] else 'not ready'} (pid {s['pid']})")
    print(f"the Guest Board: {WEBUI_URL}")
    inet = report["internet"]
    print(f"internet: dns {'up' if inet['dns'] else 'down'}, http {'up' if inet['http'] else 'down'}")
    isp = report["isp"]
    if isp["up"]:
        print(
            f"ISP: slicer {'up' if isp['slicer'] else 'down'}, aggregation switch "
            f"{'connected' if isp['switch_connected'] else 'not connected'}, household B's router "
            f"{'up' if isp['b_router'] else 'down'}"
        )
        for name, h in isp["households"].items():
            queues = ", ".join(f"{q} {c['bytes']} B ({c['drops']} dropped)" for q, c in h["queues"].items())
            print(
                f"  household {name} {' '.join(h['address'])}: {'connected' if h['connected'] else 'not connected'}, "
                f"{h['rules']} rules; downlink queues: {queues}"
            )
    else:
        print("ISP: down")
    for c in report["clients"]:
        print(f"  client {c['name']:<12} {c['mac']}  {c['ipv4'] or '(no address)'}")


def _client(home: Home, args) -> None:
    cmd = args.client_command
    if cmd == "add":
        print(
            f"client {args.name} joined the air as "
            f"{home.add(args.name, args.mac, args.rssi, args.retries, args.dot1x)}"
        )
    elif cmd == "del":
        home.remove(args.name)
        print(f"client {args.name} left")
    elif cmd == "exec":
        home.mac(args.name)  # says so if there is no such client
        os.execvp("ip", ["ip", "netns", "exec", f"hw-c-{args.name}", *_strip_dashes(args.cmd)])
    elif cmd == "dhcp":
        if args.release:
            home.release(args.name)
        else:
            print(home.dhcp(args.name, args.timeout))
    elif cmd == "auth":
        if args.status:
            print(home.auth_status(args.name), end="")
        else:
            home.auth(args.name)
    elif cmd == "radio":
        home.radio(args.name, args.rssi, args.retries)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="homenet", description="the emulated home network around a Homework router")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="create everything and start the router's services")
    sub.add_parser("down", help="remove everything; safe after a crash")
    sub.add_parser("status", help="what is up").add_argument("--json", action="store_true")
    sub.add_parser("setup-code", help="the web UI's one-time first-run code")
    sub.add_parser("restart", help="restart a router service").add_argument(
        "service", choices=["controller", "hwdb", "webui", "hostapd"]
    )
    client = sub.add_parser("client", help="emulated devices").add_subparsers(dest="client_command", required=True)
    ca = client.add_parser("add", help="a new device joins the air")
    ca.add_argument("name")
    ca.add_argument("--mac")
    ca.add_argument("--rssi", type=int, default=-50, help="signal strength the router sees, dBm")
    ca.add_argument("--retries", type=float, default=0, help="wireless retransmissions per second")
    ca.add_argument(
        "--8021x",
        dest="dot1x",
        metavar="IDENTITY:PASSWORD",
        help="give it an 802.1X identity that the router's hostapd accepts",
    )
    cau = client.add_parser("auth", help="run wpa_supplicant in a device (802.1X)")
    cau.add_argument("name")
    cau.add_argument("--status", action="store_true", help="print wpa_cli status instead")
    cr = client.add_parser("radio", help="change how a device's radio link looks")
    cr.add_argument("name")
    cr.add_argument("--rssi", type=int)
    cr.add_argument("--retries", type=float)
    client.add_parser("del", help="a device leaves").add_argument("name")
    ce = client.add_parser("exec", help="run a command inside a device")
    ce.add_argument("name")
    ce.add_argument("cmd", nargs=argparse.REMAINDER)
    cdh = client.add_parser("dhcp", help="run dhclient in a device (prints the address it got)")
    cdh.add_argument("name")
    cdh.add_argument("--release", action="store_true", help="release the lease instead")
    cdh.add_argument("--timeout", type=int, default=20)
    router = sub.add_parser("router", help="where the router's services run").add_subparsers(
        dest="router_command", required=True
    )
    router.add_parser("exec", help="run a command where the router's services run").add_argument(
        "cmd", nargs=argparse.REMAINDER
    )
    sub.add_parser("radio-loop", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    home = Home()
    try:
        if args.command == "up":
            home.up()
            print(
                f"homenet is up. Logs in {home.processes.logs}. "
                "Add a device: homenet client add laptop; homenet client dhcp laptop"
            )
        elif args.command == "down":
            home.down()
            print("homenet is down")
        elif args.command == "status":
            _print_status(home, args.json)
        elif args.command == "setup-code":
            print(home.setup_code())
        elif args.command == "restart":
            home.restart(args.service)
            print(f"{args.service} restarted")
        elif args.command == "client":
            _client(home, args)
        elif args.command == "router":
            cmd = _strip_dashes(args.cmd)
            os.environ["PATH"] = f"{HWDB_BIN.parent}:{os.environ['PATH']}"
            os.execvp(cmd[0], cmd)
        elif args.command == "radio-loop":
            radio.loop(home.run_dir, home.station_dump)
    except HomenetError as exc:
        print(f"homenet: {exc}", file=sys.stderr)
        sys.exit(1)
