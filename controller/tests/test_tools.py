"""The measuring tools `make bench` runs drive the real controller's code paths from outside its tests, so a
change to those paths must keep them running: a broken tool fails here, not an hour into a bench run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def test_dhcp_path_measures_every_phase_of_a_small_storm(tmp_path):
    out = tmp_path / "dhcp_path.json"
    subprocess.run(
        [sys.executable, TOOLS / "dhcp_path.py", "--devices", "5", "--rounds", "1", "--json", out],
        check=True,
        capture_output=True,
        timeout=120,
    )
    result = json.loads(out.read_text())
    # The tool itself asserts that every frame was answered and every newcomer's rules reached the switch.
    assert result["devices"] == 5
    for phase in ("discover", "request", "held", "cpu"):
        assert result[phase]["median_us"] > 0, phase
