#!/usr/bin/env bash
# A libFuzzer campaign over every fuzz target (clang, ASan + UBSan): builds the fuzz preset,
# writes the seed corpora, and runs each target for SECONDS (default 600) on JOBS workers
# (default: the cores). The corpora grow under build/fuzz/corpus/<target>; crashes land in
# build/fuzz/crashes/. Prints each target's execution count at the end.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(frames plan schedule onnx config snapshot namespace_policy peer etcd)
jobs="$(nproc)"

./scripts/install-deps.sh clang libclang-rt-14-dev
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"$jobs" --target fuzz_seeds $(printf 'fuzz_%s ' "${targets[@]}")
out=build/fuzz
"$out/tests/fuzz/fuzz_seeds" "$out/seeds"
mkdir -p "$out/crashes" "$out/logs"
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t"
  echo "==> fuzz_$t for ${seconds}s on $jobs workers"
  (cd "$out/logs" && ASAN_OPTIONS=detect_leaks=0 "../tests/fuzz/fuzz_$t" \
      -max_total_time="$seconds" -fork="$jobs" -ignore_crashes=0 -timeout=10 -rss_limit_mb=4096 \
      -artifact_prefix="../crashes/$t-" "../corpus/$t" "../seeds/$t" > "$t.log" 2>&1) || {
    echo "fuzz_$t stopped with a finding: $out/logs/$t.log"; tail -30 "$out/logs/$t.log"; exit 1; }
  echo "executions: $(grep -Eo '^#[0-9]+' "$out/logs/$t.log" | tail -1)"
done
