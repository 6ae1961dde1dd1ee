#!/usr/bin/env bash
# make test N times in a row from a fresh clone of HEAD, as CI runs it; stops at the first red run.
# HOG=1 keeps one core busy the whole time, as a noisy CI machine would; SLOW=1 (passed on to make)
# runs the image's boot stories as on a machine whose emulation is about three times slower.
set -euo pipefail
runs=${1:-10}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/homework-repeat.XXXXXX)
git clone -q "$repo" "$work/clone"
hog=""
if [[ ${HOG:-0} == 1 ]]; then
  (while :; do :; done) &
  hog=$!
  trap 'kill $hog 2>/dev/null' EXIT
fi
for i in $(seq "$runs"); do
  start=$(date +%s)
  if (cd "$work/clone" && make test) >"$work/run-$i.log" 2>&1; then
    echo "run $i/$runs: green in $(( $(date +%s) - start )) s"
  else
    echo "run $i/$runs: RED after $(( $(date +%s) - start )) s; log: $work/run-$i.log"
    tail -40 "$work/run-$i.log"
    exit 1
  fi
done
echo "$runs of $runs runs green (logs in $work)"
