#!/usr/bin/env bash
# E2E_CHECK_CMD: wait until the device with E2E_MAC is connected (its forced renewal gets the
# hour-long lease and it fetches a page by name) or refused (it fetches nothing). 40 s at most.
set -uo pipefail
H="$(dirname "$0")/../../homenet/homenet"
name=$("$H" status --json | python3 -c "import json,sys; print(next(c['name'] for c in json.load(sys.stdin)['clients'] if c['mac'] == '$E2E_MAC'))")
for _ in $(seq 20); do
  if [[ $E2E_EXPECT == connected ]]; then
    "$H" client dhcp "$name" >/dev/null 2>&1
    left=$("$H" client exec "$name" -- ip -4 -o addr show wlan0 | grep -o 'valid_lft [0-9]*' | cut -d' ' -f2)
    sleep 1  # dhclient-script rewrites resolv.conf just after the renewal
    code=$("$H" client exec "$name" -- curl -s -m 3 -o /dev/null -w '%{http_code}' http://www.example.test/)
    [[ ${left:-0} -gt 3500 && $code == 200 ]] && exit 0
  else
    code=$("$H" client exec "$name" -- curl -s -m 3 -o /dev/null -w '%{http_code}' http://198.51.100.80/)
    [[ $code != 200 ]] && exit 0
  fi
  sleep 1
done
echo "device $E2E_MAC ($name) never became $E2E_EXPECT" >&2
exit 1
