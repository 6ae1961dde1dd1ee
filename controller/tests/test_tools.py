"""The measuring tools `make bench` runs drive the real controller's code paths from outside its tests, so a
change to those paths must keep them running: a broken tool fails here, not an hour into a bench run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def measured(tmp_path: Path, tool: str, *args: str) -> dict:
    """What the tool wrote to its --json file, run small."""
    out = tmp_path / f"{tool}.json"
    subprocess.run([sys.executable, TOOLS / tool, *args, "--json", out], check=True, capture_output=True, timeout=120)
    return json.loads(out.read_text())


def test_dhcp_path_measures_every_phase_of_a_small_storm(tmp_path):
    result = measured(tmp_path, "dhcp_path.py", "--devices", "5", "--rounds", "1")
    # The tool itself asserts that every frame was answered and every newcomer's rules reached the switch.
    assert result["devices"] == 5
    for phase in ("discover", "request", "held", "cpu"):
        assert result[phase]["median_us"] > 0, phase


def test_export_parse_measures_both_paths_of_the_flow_collector(tmp_path):
    result = measured(tmp_path, "export_parse.py", "--datagrams", "300", "--rounds", "3")
    # The tool itself fails when the two paths read different records.
    assert result["datagrams"] == 300 and result["rounds"] == 3
    for capture in ("ipv4-fetches", "both-families"):
        assert 0 < result[capture]["fast"]["median_us"] < result[capture]["general"]["median_us"], capture
    assert result["collector"]["read"] + result["collector"]["dropped"] == 300
    assert result["collector"]["cpu_us_per_datagram"] > 0
