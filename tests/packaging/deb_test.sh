#!/usr/bin/env bash
# Builds the .deb with CPack from a build tree, unpacks it into a throwaway root and runs what it
# installed from there: both programs, the daemon on a temporary socket, a put and a get, and
# the Python package. Nothing is installed on the machine itself.
#   tests/packaging/deb_test.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d /tmp/tierpool-deb.XXXXXX)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/out/tierpool_*.deb)
info=$(dpkg-deb -I "$deb")
echo "$info" | grep -q "^ Package: tierpool" || { echo "$info"; exit 1; }
echo "$info" | grep -Eq "^ Depends:.*libc6" || { echo "no shared-library Depends: $info"; exit 1; }
dpkg-deb --ctrl-tarfile "$deb" | tar -tf - | grep -q "postinst" || { echo "no postinst"; exit 1; }
root="$work/root"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/tierpool usr/bin/tierpoold usr/include/tierpool/client.h usr/include/tierpool/c.h \
         usr/lib/pkgconfig/tierpool.pc usr/lib/systemd/system/tierpoold.service; do
  [ -e "$root/$f" ] || { echo "missing from the package: /$f"; dpkg-deb -c "$deb"; exit 1; }
done
incdir=$(PKG_CONFIG_PATH="$root/usr/lib/pkgconfig" pkg-config --variable=includedir tierpool)
[ -e "$incdir/tierpool/client.h" ] ||
  { echo "pkg-config's includedir $incdir has no tierpool/client.h"; exit 1; }

export -n LD_LIBRARY_PATH
"$root/usr/bin/tierpool" --version | grep -q "^tierpool [0-9]"
"$root/usr/bin/tierpoold" --version | grep -q "^tierpoold [0-9]"

sock="$work/tierpool.sock"
"$root/usr/bin/tierpoold" --socket "$sock" --dram 32M --hbm 0 --no-populate \
  --metrics-listen off --log-level warn &
pid=$!
for _ in $(seq 1 100); do
  [ -S "$sock" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "tierpoold from the package exited"; exit 1; }
  sleep 0.1
done
[ -S "$sock" ] || { echo "tierpoold from the package did not start"; exit 1; }
head -c 100000 /dev/urandom >"$work/in.bin"
"$root/usr/bin/tierpool" --socket "$sock" put deb-test "$work/in.bin" >/dev/null
"$root/usr/bin/tierpool" --socket "$sock" get deb-test "$work/out.bin" >/dev/null
cmp "$work/in.bin" "$work/out.bin"

pydir=$(ls -d "$root"/usr/lib/python3*/dist-packages 2>/dev/null | head -1)
if [ -n "$pydir" ]; then
  PYTHONPATH="$pydir" /usr/bin/python3 - "$sock" "$work/in.bin" "$root" <<'PY'
import sys
import tierpool
assert tierpool.__file__.startswith(sys.argv[3]), tierpool.__file__
with tierpool.Client(sys.argv[1]) as c:
    assert c.get("deb-test") == open(sys.argv[2], "rb").read()
PY
fi
echo "deb ok: $(basename "$deb")"
