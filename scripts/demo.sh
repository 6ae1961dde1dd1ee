#!/usr/bin/env bash
# make demo: the emulated home with a few devices, and what to try next.
set -euo pipefail
cd "$(dirname "$0")/.."
H=.venv/bin/homenet
$H up
for device in laptop phone tablet; do
  $H client add "$device" >/dev/null 2>&1 || true   # already there from an earlier demo
  printf '%-7s asked to join and got %s\n' "$device" "$($H client dhcp "$device")"
done
laptop_mac=$($H client exec laptop -- cat /sys/class/net/wlan0/address)
curl -sf -X POST "http://127.0.0.1:8081/ws.v1/permit/$laptop_mac" >/dev/null
phone_mac=$($H client exec phone -- cat /sys/class/net/wlan0/address)
setup_code=$($H setup-code 2>/dev/null || echo "(none: the owner account exists; sign in)")
cat <<EOT

The emulated home is up: the laptop is permitted; the phone and the tablet are pending.

  The Guest Board:                 http://127.0.0.1:8080  (first visit: enter the setup code
                                   $setup_code and choose the owner password; then drag the
                                   phone to "Connected" to let it in)

  The phone page (priorities):     http://127.0.0.1:8080/#/apps  (put "video-call" High; "Test my
                                   connection" grades the line's latency under load)

  Devices the router knows:        curl -s http://127.0.0.1:8081/ws.v1/status | python3 -m json.tool
  The laptop browses by name:      $H client exec laptop -- curl -s http://www.example.test/
  The phone cannot (pending):      $H client exec phone -- curl -s -m 3 http://www.example.test/
  Let the phone in:                curl -s -X POST http://127.0.0.1:8081/ws.v1/permit/$phone_mac
  ...its next renewal (within 15 s) gets a one-hour lease; or renew now: $H client dhcp phone
  The switch's rules:              ovs-ofctl -O OpenFlow13 dump-flows br-lan
  Everything at a glance:          $H status
  Logs:                            /run/homenet/logs/
  Stop and clean up:               make down
EOT
