"""The firmware image's own tools, installed on the router beside the services: the router's
network at boot (`network`), the boot health check that blesses an update (`health`), the
signed A/B update (`update`, `bundle`, `boot`), the data partition's format (`state`), and the
console banner with the first-run setup code (`console`).

Paths and names the build (image/build.py) and the router share are defined here once."""

from __future__ import annotations

from pathlib import Path

SLOTS = ("a", "b")
ROOT_PARTLABEL = "homework-root-{slot}"
ESP_PARTLABEL = "homework-esp"
DATA_PARTLABEL = "homework-data"

ESP = Path("/efi")
STATE = Path("/var/lib/homework")
RUN = Path("/run/homework")
VENV = Path("/usr/lib/homework/venv")
SHARE = Path("/usr/share/homework")
VERSION_FILE = SHARE / "version"
UPDATE_KEY = SHARE / "update-key.pem"
# The first-run setup code printed on a box's label, written to the data partition at the factory
# (absent on a box without a label: the web UI then makes one and the console shows it).
LABEL_SETUP_CODE = STATE / "config" / "setup-code"

# The router's fixed names for its two ports once network setup has renamed them.
WAN_IFACE, LAN_PORT, BRIDGE = "wan", "lan", "br-lan"
ROUTER_LAN_IP = "10.2.0.1"
ROUTER_MAC = "02:48:57:00:00:01"
