#!/usr/bin/env bash
# Lets shared memory that asks for it use transparent 2 MiB pages: the kernel's
# /sys/kernel/mm/transparent_hugepage/shmem_enabled from "never" (Debian's default) to "advise".
# tierpoold's arenas and its clients' mappings of them ask (madvise MADV_HUGEPAGE); other
# programs' shared memory keeps 4 KiB pages unless it asks too. Copies of 256 KiB and up through
# the arenas then meet a TLB entry per 2 MiB: docs/benchmarks/redis.md, "Transparent huge pages".
#
# Until the next boot only; docs/operations.md ("Sizing the tiers") says how to keep it.
#   --undo                      puts "never" back
#   TIERPOOL_NO_NODE_TUNING=1   changes nothing (quickstart.sh calls this script)
set -euo pipefail

SETTING=/sys/kernel/mm/transparent_hugepage/shmem_enabled
want=advise
[ "${1:-}" = "--undo" ] && want=never

if [ "${TIERPOOL_NO_NODE_TUNING:-0}" = 1 ]; then
  echo "==> TIERPOOL_NO_NODE_TUNING=1: kernel settings left as they are"
  exit 0
fi
if [ ! -r "$SETTING" ]; then
  echo "==> this kernel has no $SETTING: tierpoold's arenas use 4 KiB pages (or --huge-pages)"
  exit 0
fi
now=$(sed -e 's/.*\[\(.*\)\].*/\1/' "$SETTING")
if [ "$now" = "$want" ] || { [ "$want" = advise ] && [ "$now" != never ]; }; then
  echo "==> shared memory's transparent huge pages: $now (left as it is)"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
if { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; } &&
  echo "$want" | $SUDO tee "$SETTING" >/dev/null 2>&1; then
  if [ "$want" = advise ]; then back="$0 --undo puts $now back"; else back="$0 sets advise again"; fi
  echo "==> shared memory's transparent huge pages: $now -> $want, until the next boot ($back)"
else
  echo "==> could not set $SETTING to $want (not root, or a read-only /sys): tierpoold's" \
    "arenas use 4 KiB pages; 256 KiB copies run slower (docs/operations.md, \"Sizing the tiers\")"
fi
