#!/usr/bin/env bash
# tierpoold built with -DTIERPOOL_JEMALLOC=ON runs on jemalloc: the library is mapped into the
# running daemon, and its log says so.
#   tests/packaging/allocator_test.sh path/to/tierpoold
set -euo pipefail
daemon=$1
dir=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
"$daemon" --socket "$dir/s.sock" --dram 16M --hbm 0 --metrics-listen off >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  grep -q "listening on" "$dir/log" && break
  kill -0 "$pid" 2>/dev/null || { echo "tierpoold exited:"; cat "$dir/log"; exit 1; }
  sleep 0.1
done
grep -q "memory allocator: jemalloc" "$dir/log" ||
  { echo "tierpoold's log does not name jemalloc:"; cat "$dir/log"; exit 1; }
grep -q "libjemalloc" "/proc/$pid/maps" ||
  { echo "libjemalloc is not mapped into tierpoold (pid $pid)"; exit 1; }
echo "tierpoold (pid $pid) runs on $(grep -o '[^ ]*libjemalloc[^ ]*' "/proc/$pid/maps" | head -1)"
