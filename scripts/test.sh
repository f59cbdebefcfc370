#!/usr/bin/env bash
# Builds everything with warnings as errors and runs the whole test suite.
# Usage: scripts/test.sh [PRESET]   (ci by default; asan for the sanitizer build)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"

./scripts/install-deps.sh
echo "==> configuring and building (preset $preset)"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j"$(nproc)"
echo "==> running the tests"
ctest --preset "$preset" -j"$(nproc)"
