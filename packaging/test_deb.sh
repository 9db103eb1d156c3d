#!/usr/bin/env bash
# The Debian package as an operator meets it (a step of .ci/run; root on a Debian 12 machine
# with the CUDA 13 toolkit in /usr/local/cuda; systemd need not run). It installs the package
# into the real / and removes it at the end, so run it only where that is fine (CI, a scratch
# machine):
#   1. `cpack -G DEB` in a built build folder: kiln_*.deb and kiln-dbgsym_*.ddeb;
#   2. the control fields: Debian package names in Depends, nothing of CUDA;
#   3. `apt-get install ./kiln_*.deb` (dependencies resolved by apt), then `dpkg -L kiln`: the
#      units where systemd looks, the sysusers file, the docs, kiln.pc, CMake package; the kiln
#      user exists; every installed ELF file is stripped and its debug file, named by its build
#      id, is in the .ddeb;
#   4. the installed kilnd, started as the kiln user on a temporary socket and cache, compiles a
#      kernel the installed `kiln` CLI asks for (NVRTC found through kilnd's run path, the
#      kernel library found under /usr/share/kiln/kernels), then serves it from memory;
#   5. a C program compiled and linked with `pkg-config --cflags --libs kiln` runs against the
#      installed library (found by ld.so after the package's ldconfig);
#   6. `dpkg --purge kiln` removes it all (the kiln user stays, as Debian packages leave them).
#
#   bash packaging/test_deb.sh [BUILD_DIR] [WORK_DIR]     (defaults: build, /tmp/kiln-deb-test)
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
work="${2:-/tmp/kiln-deb-test}"
export DEBIAN_FRONTEND=noninteractive

fail() { echo "test_deb: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root: it installs the package with apt-get and dpkg"
installed() { [ "$(dpkg-query -W -f='${Status}' kiln 2>/dev/null)" != "" ] && [ "$(dpkg-query -W -f='${Status}' kiln)" != "unknown ok not-installed" ]; }
! installed || fail "a kiln package is installed (or its configuration left): dpkg --purge kiln first"

rm -rf "$work"
mkdir -p "$work/pkg"
kilnd_pid=""
cleanup() {
  if [ -n "$kilnd_pid" ]; then kill "$kilnd_pid" 2>/dev/null || true; wait "$kilnd_pid" 2>/dev/null || true; fi
  if installed; then dpkg --purge kiln >/dev/null || echo "test_deb: dpkg --purge kiln failed" >&2; fi
}
trap cleanup EXIT

# --- 1. build the packages ---------------------------------------------------------------------
start=$(date +%s)
(cd "$build" && cpack -G DEB -B "$work/pkg") >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; fail "cpack -G DEB"; }
echo "test_deb: cpack took $(($(date +%s) - start)) s"
deb=$(ls "$work"/pkg/kiln_*.deb)
ddeb=$(ls "$work"/pkg/kiln-dbgsym_*.ddeb)
ls -l "$deb" "$ddeb"

# --- 2. control fields -------------------------------------------------------------------------
depends="$(dpkg-deb -f "$deb" Depends)"
echo "test_deb: Depends: $depends"
for p in libgrpc++1.51 libprotobuf32 libsqlite3-0 libssl3 libc6; do
  [[ ",$depends," == *", $p "* || ",$depends," == *",$p "* || ",$depends," == *", $p,"* ]] ||
    fail "Depends lacks $p: $depends"
done
[[ "$depends" != *cuda* && "$depends" != *nvrtc* ]] || fail "Depends names CUDA, which is no Debian package: $depends"

# --- 3. install; what is installed -------------------------------------------------------------
apt-get install -y -qq "$deb" >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get install $deb"; }
dpkg -L kiln >"$work/files"
for f in /usr/bin/kilnd /usr/bin/kiln /usr/bin/kiln-launch /usr/lib/systemd/system/kilnd.service \
  /usr/lib/systemd/system/kilnd.socket /usr/lib/sysusers.d/kiln.conf /usr/share/doc/kiln/operations.md \
  /usr/share/doc/kiln/README.md /usr/share/kiln/kernels/include; do
  grep -qx "$f" "$work/files" || fail "dpkg -L kiln has no $f"
done
grep -q '/pkgconfig/kiln.pc$' "$work/files" || fail "dpkg -L kiln has no kiln.pc"
grep -q '/cmake/kiln/kilnConfig.cmake$' "$work/files" || fail "dpkg -L kiln has no kilnConfig.cmake"
grep -qx 'ExecStart=/usr/bin/kilnd' /usr/lib/systemd/system/kilnd.service ||
  fail "kilnd.service does not start /usr/bin/kilnd: $(grep ExecStart /usr/lib/systemd/system/kilnd.service)"
getent passwd kiln >/dev/null || fail "the package did not create the kiln user"

dpkg-deb -c "$ddeb" | awk '{print $NF}' >"$work/debug-files"
elves=0
while read -r f; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  desc="$(file -b "$f")"
  [[ "$desc" == ELF* ]] || continue
  elves=$((elves + 1))
  [[ "$desc" == *", stripped"* ]] || fail "$f is not stripped: $desc"
  id="$(readelf -n "$f" | sed -n 's/^ *Build ID: //p')"
  [ -n "$id" ] || fail "$f has no build id"
  grep -qx "./usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" "$work/debug-files" ||
    fail "$(basename "$ddeb") has no debug file for $f (build id $id)"
done <"$work/files"
[ "$elves" -ge 4 ] || fail "only $elves ELF files installed (kilnd, kiln, kiln-launch, libkiln_client expected)"
echo "test_deb: $elves ELF files stripped, their debug files in $(basename "$ddeb")"

# --- 4. the installed daemon and CLI -----------------------------------------------------------
run="$work/run"
mkdir -p "$run"
chown kiln:kiln "$run"
sock="$run/kilnd.sock"
# setpriv execs kilnd (runuser would stay its parent and take the SIGTERM below).
setpriv --reuid kiln --regid kiln --init-groups /usr/bin/kilnd --socket "$sock" --cache-dir "$run/cache" >"$work/kilnd.log" 2>&1 &
kilnd_pid=$!
for _ in $(seq 1 150); do
  runuser -u kiln -- /usr/bin/kiln --socket "$sock" cache stats >/dev/null 2>&1 && break
  kill -0 "$kilnd_pid" 2>/dev/null || { cat "$work/kilnd.log"; fail "the installed kilnd exited"; }
  sleep 0.2
done
get() { runuser -u kiln -- /usr/bin/kiln --socket "$sock" get rmsnorm dtype=bf16 hidden=4096 --arch sm_90; }
first="$(get)" || { cat "$work/kilnd.log"; fail "kiln get (first) against the installed kilnd"; }
echo "$first"
grep -q '^origin *compiled' <<<"$first" || fail "the first kiln get was not compiled: $first"
second="$(get)" || fail "kiln get (second)"
grep -q '^origin *memory' <<<"$second" || fail "the second kiln get was not served from memory: $second"
kill "$kilnd_pid"
wait "$kilnd_pid" || fail "the installed kilnd did not stop cleanly on SIGTERM: $(tail -5 "$work/kilnd.log")"
kilnd_pid=""

# --- 5. pkg-config against the installed package -----------------------------------------------
[ "$(pkg-config --modversion kiln)" = "$(dpkg-deb -f "$deb" Version)" ] ||
  fail "pkg-config --modversion kiln: '$(pkg-config --modversion kiln 2>&1)'"
cat >"$work/pc.c" <<'EOF'
#include <kiln/kiln.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  if (strcmp(kiln_version(), KILN_VERSION_STRING) != 0) return 1;
  printf("kiln %s through pkg-config\n", kiln_version());
  return 0;
}
EOF
# shellcheck disable=SC2046  # pkg-config's output is meant to be split into words
cc -Wall -Werror -o "$work/pc" "$work/pc.c" $(pkg-config --cflags --libs kiln) || fail "cc ... \$(pkg-config --cflags --libs kiln)"
"$work/pc" || fail "the program linked through pkg-config did not run"
# With no daemon the installed library's embedded engine finds the packaged kernels beside it
# (<prefix>/share/kiln/kernels), with no KILN_KERNELS_DIR.
cat >"$work/mode.c" <<'EOF'
#include <kiln/kiln.h>
#include <stdio.h>
int main(void) {
  printf("%s\n", kiln_describe_mode());
  return 0;
}
EOF
# shellcheck disable=SC2046  # as above
cc -Wall -Werror -o "$work/mode" "$work/mode.c" $(pkg-config --cflags --libs kiln) || fail "cc ... mode.c"
mode="$(env -u KILN_KERNELS_DIR -u KILN_MODE KILN_SOCKET="$work/no-kilnd.sock" KILN_CACHE_DIR="$work/embedded-cache" "$work/mode")" ||
  fail "kiln_describe_mode through the installed library"
echo "$mode"
grep -q "^embedded: .*kernels /usr/share/kiln/kernels" <<<"$mode" ||
  fail "the installed library's embedded engine does not use /usr/share/kiln/kernels: $mode"

# --- 6. remove ---------------------------------------------------------------------------------
dpkg --purge kiln >/dev/null
if [ -e /usr/bin/kilnd ] || [ -e /usr/lib/systemd/system/kilnd.service ]; then fail "dpkg --purge kiln left files behind"; fi
! installed || fail "dpkg --purge kiln left the package's state: $(dpkg-query -W -f='${Status}' kiln)"
rm -rf "$work"
echo "test_deb: ok ($(($(date +%s) - start)) s)"
