"""The emulated radio: every second, what `iw dev wlan0 station dump` would print on a router."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .net import run
from .services import HomenetError
from .topology import CLIENT_NS_PREFIX, NS_AIR, WLAN


def station_dump(run_dir: Path, retries: dict[str, float]) -> str:
    blocks = []
    for settings_file in sorted((run_dir / "clients").glob("*/radio.json")):
        name = settings_file.parent.name
        try:
            settings = json.loads(settings_file.read_text())
            mac = run("cat", f"/sys/class/net/{WLAN}/address", ns=CLIENT_NS_PREFIX + name).strip()
            stats = json.loads(run("ip", "-s", "-j", "link", "show", f"c-{name}", ns=NS_AIR))[0]["stats64"]
        except (OSError, ValueError, HomenetError, KeyError, IndexError):
            continue  # a client coming or going
        retries[name] = retries.get(name, 0.0) + settings.get("retries_per_s", 0)
        # Seen from the access point: what the station sends is its rx, what it gets its tx.
        blocks.append(
            f"Station {mac} (on {WLAN})\n"
            f"\trx packets:\t{stats['tx']['packets']}\n\ttx packets:\t{stats['rx']['packets']}\n"
            f"\ttx retries:\t{int(retries[name])}\n\tsignal:  \t{settings.get('rssi', -50)} dBm\n"
        )
    return "".join(blocks)


def loop(run_dir: Path, out: Path) -> None:
    retries: dict[str, float] = {}
    while True:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(station_dump(run_dir, retries))
        tmp.replace(out)
        time.sleep(1)
