"""fvctl: manage the households of a running isp-flowvisor (JSON-RPC on loopback)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from .admin import DEFAULT_TOKEN_FILE


class FvctlError(RuntimeError):
    pass


def call(rpc: str, method: str, params: dict[str, Any] | None = None, token: str = "") -> Any:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://{rpc}/", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            reply = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise FvctlError(f"{exc.code} {exc.reason}") from None
    except OSError as exc:
        raise FvctlError(f"cannot reach isp-flowvisor at {rpc}: {exc}") from None
    if "error" in reply:
        raise FvctlError(reply["error"]["message"])
    return reply["result"]


def certificate_sha256(path: Path) -> str:
    """The fingerprint the registry keeps: SHA-256 of the certificate's DER."""
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()


def _record(args: argparse.Namespace) -> dict[str, Any]:
    record: dict[str, Any] = {}
    if args.address:
        record["addresses"] = args.address
    for option, key in (
        ("rate", "guaranteed_mbit"),
        ("quota", "flow_quota"),
        ("msg_rate", "msg_rate"),
        ("msg_burst", "msg_burst"),
        ("source_address", "source_address"),
        ("on_disconnect", "on_disconnect"),
        ("cert_sha256", "cert_sha256"),
    ):
        if getattr(args, option) is not None:
            record[key] = getattr(args, option)
    if args.port:
        record["ports"] = args.port
    if args.mac:
        record["macs"] = args.mac
    if args.cert is not None:
        record["cert_sha256"] = certificate_sha256(args.cert)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fvctl", description=__doc__)
    parser.add_argument("--rpc", default="127.0.0.1:6644", help="the slicer's admin address (loopback)")
    parser.add_argument(
        "--token-file",
        type=Path,
        default=DEFAULT_TOKEN_FILE,
        help=f"the slicer's token file (default {DEFAULT_TOKEN_FILE}; readable by root only)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every household, with its rule count and connection")
    for name in ("show", "remove"):
        sub.add_parser(name).add_argument("name")
    sub.add_parser("stats").add_argument("name", nargs="?")
    sub.add_parser("reload", help="re-read the registry (sessions stay up)")
    for name in ("add", "update"):
        p = sub.add_parser(name)
        p.add_argument("name")
        p.add_argument(
            "--address",
            action="append",
            help="an IPv4 prefix of the household, or the IPv6 prefix delegated to it "
            "(repeatable; update replaces them all)",
        )
        p.add_argument("--rate", type=float, help="guaranteed downlink rate, Mbit/s")
        p.add_argument("--quota", type=int, help="flow-table quota (rules)")
        p.add_argument("--msg-rate", type=float, help="control messages per second")
        p.add_argument("--msg-burst", type=int, help="control-message burst")
        p.add_argument("--cert", type=Path, help="the household controller's client certificate (PEM)")
        p.add_argument("--cert-sha256", help="or its SHA-256 fingerprint")
        p.add_argument("--source-address", help="plain-TCP test mode only: the controller's source address")
        p.add_argument("--port", type=int, action="append", help="a switch port private to the household")
        p.add_argument("--mac", action="append", help="its CPE's MAC, which its rules may write (repeatable)")
        p.add_argument("--on-disconnect", choices=("keep", "delete"), help="what happens to its rules")
    args = parser.parse_args(argv)
    try:
        token = args.token_file.read_text().strip()
    except OSError as exc:
        print(f"fvctl: cannot read the slicer's token ({exc}); run as root or give --token-file", file=sys.stderr)
        return 1
    try:
        if args.command == "add":
            result = call(args.rpc, "add", {"name": args.name, **_record(args)}, token)
        elif args.command == "update":
            result = call(args.rpc, "update", {"name": args.name, "changes": _record(args)}, token)
        elif args.command in ("show", "remove"):
            result = call(args.rpc, args.command, {"name": args.name}, token)
        elif args.command == "stats":
            result = call(args.rpc, "stats", {"name": args.name} if args.name else {}, token)
        else:
            result = call(args.rpc, args.command, {}, token)
    except (FvctlError, OSError, ValueError) as exc:
        print(f"fvctl: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
