#!/usr/bin/env bash
# Quick start: install what building and running needs (not the tests' PyTorch and friends), let
# tierpoold's shared memory use transparent 2 MiB pages (scripts/tune-node.sh), build, start
# tierpoold, and show its main job: a training step's schedule, a plan under an hbm budget, and
# the plan played live with real bytes beside reactive swapping and no offload. Then a put, a
# get and a view, from the command line and from Python. --keep-running leaves the daemon up.
set -euo pipefail
cd "$(dirname "$0")/.."

keep_running=0
[ "${1:-}" = "--keep-running" ] && keep_running=1

./scripts/install-deps.sh --run
# Transparent 2 MiB pages for the shared memory that asks for them (tierpoold's arenas):
# TIERPOOL_NO_NODE_TUNING=1 skips it, scripts/tune-node.sh --undo reverts it.
./scripts/tune-node.sh
echo "==> building (cmake --preset default, without the tests and benchmarks)"
cmake --preset default -DTIERPOOL_BUILD_TESTS=OFF -DTIERPOOL_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build/default -j"$(nproc)" >/dev/null
built=$SECONDS

# Installs the daemon, the tools, the C/C++ client and the Python package (for /usr/bin/python3)
# under /usr/local.
SUDO=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
  echo "==> installing under /usr/local (cmake --install build/default)"
  $SUDO cmake --install build/default >/dev/null
  $SUDO ldconfig  # libtierpool.so.0 in the loader's cache, for programs built against it
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

SCHEDULE=examples/schedules/resnet18-train-b32.pb
echo
echo "==> 1. the job: one training step of ResNet-18 (batch 32, bf16), its schedule traced from"
echo "       the model's graph (tierpool schedule from-torch; shipped as $SCHEDULE)"
"$TIERPOOL" schedule show "$SCHEDULE" --device h100 | sed -n 1,3p
echo
echo "==> 2. a plan that keeps it in 75% of that peak on an H100 (55 GB/s PCIe to host memory)"
plan=$(mktemp /tmp/tierpool-plan.XXXXXX.pb)
"$TIERPOOL" plan "$SCHEDULE" --device h100 --hbm 75% -o "$plan"
rm -f "$plan"
echo
echo "==> 3. played live, with real bytes through tierpoold, beside reactive swapping (LRU, moved"
echo "       when a step needs it) and no offload; the replay starts a tierpoold sized for each"
echo "       policy, links capped so that transfer : compute is the H100's (about 20 s)"
"$TIERPOOL" replay "$SCHEDULE" --live --device h100 --hbm 75% --compare 2>/dev/null
echo
echo "    (tierpool replay $SCHEDULE --device h100 --sweep: every budget, planned and reactive,"
echo "    and the lowest any plan keeps; --svg mem.svg draws one. docs/schedules.md)"

demo=$(mktemp -d /tmp/tierpool-demo.XXXXXX)
head -c $((8 * 1024 * 1024)) /dev/urandom >"$demo/activation.bin"
echo
echo "==> 4. put, promote to hbm, get back and compare: an 8 MiB tensor under 'layer0.activation'"
"$TIERPOOL" put layer0.activation "$demo/activation.bin" --kind activation --dtype float16
"$TIERPOOL" promote layer0.activation
"$TIERPOOL" get layer0.activation "$demo/back.bin"
cmp "$demo/activation.bin" "$demo/back.bin" && echo "    identical: $(stat -c %s "$demo/back.bin") bytes"
"$TIERPOOL" rm layer0.activation >/dev/null
rm -rf "$demo"
echo
echo "==> 5. the same from Python$PYTHON_PATH_NOTE: bytes in, a zero-copy view out"
/usr/bin/python3 - <<'PY'
import array, tierpool
with tierpool.Client() as c:
    data = array.array("f", range(1 << 18))
    c.put("layer1.activation", data, kind="activation", tier="hbm")
    with c.view("layer1.activation") as mv:
        print("    put %d bytes, view on tier %s, identical: %s"
              % (mv.nbytes, tierpool.Tier(mv.obj.tier).name.lower(), bytes(mv) == data.tobytes()))
    c.delete("layer1.activation")
PY
echo "    (a PyTorch training loop under its plan: tierpool.torch.offload, docs/python.md)"
echo
"$TIERPOOL" stat | sed -n 1,3p
echo
if [ "$started_here" = 1 ]; then
  echo "==> 6. monitoring: /health on 127.0.0.1:9464"
  /usr/bin/python3 - <<'PY'
import urllib.request
print("    /health:", urllib.request.urlopen("http://127.0.0.1:9464/health", timeout=5).read().decode().strip())
PY
  echo
fi
echo "the main job and the rest took $((SECONDS - built)) s after the build"
if [ "$started_here" = 1 ] && [ "$keep_running" = 1 ]; then
  echo "tierpoold keeps running (pid $pid). Try: $TIERPOOL bench   Stop it: kill $pid"
else
  echo "Done. Start the daemon yourself with: $BIN/store/tierpoold   (see --help)"
  echo "then try: $TIERPOOL bench"
fi
