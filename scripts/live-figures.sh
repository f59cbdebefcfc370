#!/usr/bin/env bash
# Live-versus-simulated figures (docs/benchmarks/live.md, "Live prefetch"): each schedule under each
# profile, `none` once and reactive-lru and planned at three budgets, against a private tierpoold.
# Usage: scripts/live-figures.sh OUTDIR SCHEDULE.pb...   (tables: scripts/live-tables.py OUTDIR)
# ITERATION_MS (default 4000): the stretched iteration's length. The emulated job pays fixed
# costs per step that a device would not (a get round trip, writing its outputs with host memory
# bandwidth): about 0.2 ms per step here, 8% of a 1.5 s ResNet-50 iteration, 4% of a 4 s one.
set -euo pipefail
iteration_ms="${ITERATION_MS:-4000}"
out="$1"; shift
tierpool="${TIERPOOL:-$(dirname "$0")/../build/ci/client/tierpool}"
mkdir -p "$out"
for schedule in "$@"; do
  name="$(basename "$schedule" .pb)"
  for device in h100 gh200; do
    "$tierpool" replay "$schedule" --live --device "$device" --policy none --verify stamp \
      --iteration-ms "$iteration_ms" \
      --json "$out/$name-$device-none.json" > "$out/$name-$device-none.txt" 2>&1 || true
    for budget in 90 75 60; do
      for policy in reactive-lru planned; do
        "$tierpool" replay "$schedule" --live --device "$device" --hbm "$budget%" \
          --policy "$policy" --verify stamp --iteration-ms "$iteration_ms" --json "$out/$name-$device-$budget-$policy.json" \
          > "$out/$name-$device-$budget-$policy.txt" 2>&1 || true
      done
    done
  done
done
