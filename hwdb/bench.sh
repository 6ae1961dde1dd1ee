#!/bin/sh
# Build hwdb in release mode and run its benchmark; the JSON result goes to $1
# (default bench.json) and to stdout. Takes about 15 seconds on 2 cores.
set -eu
out=${1:-bench.json}
case $out in /*) ;; *) out="$PWD/$out" ;; esac
cd "$(dirname "$0")"
cargo build --release --locked
./target/release/hwdb-bench --out "$out"
