#!/usr/bin/env bash
# Quick start: install what is missing, let tierpoold's shared memory use transparent 2 MiB pages
# (scripts/tune-node.sh), build, start tierpoold on its built-in defaults and walk through a put,
# a get and a stat. Pass --keep-running to leave the daemon up afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

keep_running=0
[ "${1:-}" = "--keep-running" ] && keep_running=1

./scripts/install-deps.sh
# Transparent 2 MiB pages for the shared memory that asks for them (tierpoold's arenas):
# TIERPOOL_NO_NODE_TUNING=1 skips it, scripts/tune-node.sh --undo reverts it.
./scripts/tune-node.sh
echo "==> building (cmake --preset default)"
cmake --preset default -DTIERPOOL_BUILD_TESTS=OFF -DTIERPOOL_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build/default -j"$(nproc)" >/dev/null

# Installs the daemon, the tools, the C/C++ client and the Python package (for /usr/bin/python3)
# under /usr/local.
SUDO=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
  echo "==> installing under /usr/local (cmake --install build/default)"
  $SUDO cmake --install build/default >/dev/null
  PYTHON_PATH_NOTE=""
else
  echo "==> not root and no sudo: the Python package is used from the build tree"
  export PYTHONPATH="$PWD/build/default/python${PYTHONPATH:+:$PYTHONPATH}"
  PYTHON_PATH_NOTE=" (with PYTHONPATH=$PWD/build/default/python)"
fi

BIN=build/default
TIERPOOL="$BIN/client/tierpool"
LOG=$(mktemp /tmp/tierpoold-quickstart.XXXXXX.log)

started_here=0
if "$TIERPOOL" stat >/dev/null 2>&1; then
  echo "==> a tierpoold is already running; using it"
else
  echo "==> starting tierpoold with its built-in defaults (log: $LOG)"
  "$BIN/store/tierpoold" >"$LOG" 2>&1 &
  pid=$!
  started_here=1
  for _ in $(seq 1 100); do
    "$TIERPOOL" stat >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "tierpoold failed to start:"; cat "$LOG"; exit 1; }
    sleep 0.1
  done
fi
stop() { if [ "$started_here" = 1 ] && [ "$keep_running" = 0 ]; then kill "$pid" 2>/dev/null || true; fi; }
trap stop EXIT

demo=$(mktemp -d /tmp/tierpool-demo.XXXXXX)
head -c $((8 * 1024 * 1024)) /dev/urandom >"$demo/activation.bin"
echo
echo "==> 1. put: store an 8 MiB tensor (random bytes) under the key 'layer0.activation'"
"$TIERPOOL" put layer0.activation "$demo/activation.bin" --kind activation --dtype float16
echo
echo "==> 2. promote it to the hbm tier, as the prefetcher does before a tensor is needed"
"$TIERPOOL" promote layer0.activation
echo
echo "==> 3. get: read it back and compare with the original"
"$TIERPOOL" get layer0.activation "$demo/back.bin"
cmp "$demo/activation.bin" "$demo/back.bin" && echo "    identical: $(stat -c %s "$demo/back.bin") bytes"
echo
echo "==> 4. ls and stat: what the server holds, tier by tier"
"$TIERPOOL" ls
echo
"$TIERPOOL" stat
"$TIERPOOL" rm layer0.activation >/dev/null
rm -rf "$demo"
echo
echo "==> 5. the same from Python$PYTHON_PATH_NOTE: a tensor in, a zero-copy view out"
/usr/bin/python3 - <<'PY'
import torch, tierpool, tierpool.torch
with tierpool.Client() as c:
    t = torch.randn(1024, 1024)
    c.put("layer1.activation", t, kind="activation")
    with c.view("layer1.activation") as mv:
        back = torch.frombuffer(bytearray(mv), dtype=torch.float32).reshape(1024, 1024)
        print("    put %d bytes, view on tier %s, identical: %s"
              % (mv.nbytes, tierpool.Tier(mv.obj.tier).name.lower(), torch.equal(back, t)))
    c.delete("layer1.activation")
PY
echo
if [ "$started_here" = 1 ]; then
  echo "==> 6. monitoring: /health and a few of the Prometheus metrics on 127.0.0.1:9464"
  /usr/bin/python3 - <<'PY'
import urllib.request
base = "http://127.0.0.1:9464"
print("    /health:", urllib.request.urlopen(base + "/health", timeout=5).read().decode().strip())
for line in urllib.request.urlopen(base + "/metrics", timeout=5).read().decode().splitlines():
    if line.startswith(("tierpool_puts_total", "tierpool_gets_total",
                        'tierpool_tier_used_bytes{tier="dram"}')):
        print("    " + line)
PY
  echo
fi
if [ "$started_here" = 1 ] && [ "$keep_running" = 1 ]; then
  echo "tierpoold keeps running (pid $pid). Try: $TIERPOOL bench   Stop it: kill $pid"
else
  echo "Done. Start the daemon yourself with: $BIN/store/tierpoold   (see --help)"
  echo "then try: $TIERPOOL bench"
fi
