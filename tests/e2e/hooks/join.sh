#!/usr/bin/env bash
# E2E_JOIN_CMD for the web UI's browser flow: a new device joins the emulated home and runs
# dhclient. Prints its MAC on the last line.
set -euo pipefail
H="$(dirname "$0")/../../homenet/homenet"
name=$(printf '%s' "$E2E_NAME" | tr -c 'a-z0-9-' '-' | cut -c1-11 | sed 's/^-*//')
"$H" client add "$name" >/dev/null
"$H" client dhcp "$name" >/dev/null
"$H" client exec "$name" -- cat /sys/class/net/wlan0/address
