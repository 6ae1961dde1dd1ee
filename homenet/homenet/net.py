"""Shell helpers for the emulated networks: commands in namespaces, namespaces, veth pairs."""

from __future__ import annotations

import json
import os
import signal
import subprocess

from .services import HomenetError


def run(*cmd, check=True, ns=None, input=None, timeout=60) -> str:
    argv = (["ip", "netns", "exec", ns] if ns else []) + [str(c) for c in cmd]
    proc = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=timeout)
    if check and proc.returncode != 0:
        raise HomenetError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def nft_table(family: str, name: str, body: str, ns=None) -> None:
    """An nftables table of `body`'s sets and chains, unless it is there already (a home brought up again
    keeps its own)."""
    if run("nft", "list", "table", family, name, check=False, ns=ns):
        return
    run("nft", "-f", "-", ns=ns, input=f"table {family} {name} {{\n{body}}}\n")


def netns_list() -> list[str]:
    out = run("ip", "-json", "netns", "list", check=False).strip()
    return [n["name"] for n in json.loads(out)] if out else []


def link_exists(name, ns=None) -> bool:
    return (
        subprocess.run((["ip", "-n", ns] if ns else ["ip"]) + ["link", "show", name], capture_output=True).returncode
        == 0
    )


def ensure_ns(name: str) -> None:
    if name not in netns_list():
        run("ip", "netns", "add", name)
        run("ip", "link", "set", "lo", "up", ns=name)


def kill_all_in(ns: str) -> None:
    for pid in run("ip", "netns", "pids", ns, check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def veth(a, b, a_ns=None, b_ns=None, b_mac=None) -> None:
    """A veth pair with TX checksum offload off on both ends (needed by OVS's userspace datapath)."""
    if link_exists(a, a_ns):
        return
    cmd = ["ip", "link", "add", a, "type", "veth", "peer", "name", b]
    if b_mac:
        cmd += ["address", b_mac]
    if b_ns:
        cmd += ["netns", b_ns]
    run(*cmd, ns=a_ns)
    for name, ns in ((a, a_ns), (b, b_ns)):
        run("ethtool", "-K", name, "tx", "off", ns=ns)
        run("ip", "link", "set", name, "up", ns=ns)
