#!/usr/bin/env bash
# Installs the Debian 12 packages tierpool builds and tests with; skips what is already there.
#   scripts/install-deps.sh [--run] [PACKAGE...]
# --run: only what building and running needs (the daemon, the tools, the C/C++ client and the
# Python package: what scripts/quickstart.sh builds); without it, also what the tests and the
# benchmarks need (PyTorch, torchvision, ONNX, pytest, GoogleTest, Redis, etcd, fio, iperf3).
# Extra package names given as arguments are installed too (scripts/fuzz.sh adds clang's).
set -euo pipefail

RUN_PACKAGES=(
  build-essential cmake pkg-config git
  liburing-dev libnuma-dev libboost-dev libboost-program-options-dev libucx-dev
  libprotobuf-dev protobuf-compiler libspdlog-dev libxxhash-dev nlohmann-json3-dev libtomlplusplus-dev libjemalloc-dev
  libonnx-dev coinor-libclp-dev coinor-libcbc-dev libhiredis-dev libssl-dev
  python3 python3-dev python3-pybind11 pybind11-dev
)
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev clang
  fio redis-server etcd-server iperf3 ucx-utils
  python3-torch python3-torchvision python3-numpy python3-pytest python3-prometheus-client python3-onnx
)

if [ "${1:-}" = "--run" ]; then
  shift
  PACKAGES=("${RUN_PACKAGES[@]}" "$@")
else
  PACKAGES=("${RUN_PACKAGES[@]}" "${TEST_PACKAGES[@]}" "$@")
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "==> all build dependencies are installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "==> installing: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# redis-server is here only as `tierpool bench --compare redis`'s peer, which starts its own on
# a private socket: the system-wide instance Debian enables on installation is not wanted.
if [[ " ${missing[*]} " == *" redis-server "* ]] && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now redis-server >/dev/null 2>&1 &&
    echo "==> redis-server installed for benchmarks only; its system service is disabled"
fi
# etcd-server likewise: the cluster tests start their own on free loopback ports; a node that
# joins a real cluster is pointed at its etcd with --etcd.
if [[ " ${missing[*]} " == *" etcd-server "* ]] && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now etcd >/dev/null 2>&1 &&
    echo "==> etcd-server installed for tests; its system service is disabled"
fi
