"""E2E_JOIN_CMD for the web UI's browser flow: a new device (named by E2E_NAME) joins the emulated
home and runs dhclient. Prints its MAC on the last line."""

import os
import re

from homenet import Home

home = Home()
name = re.sub(r"[^a-z0-9-]", "-", os.environ["E2E_NAME"].lower())[:11].lstrip("-")
mac = home.add(name)
home.dhcp(name)
print(mac)
