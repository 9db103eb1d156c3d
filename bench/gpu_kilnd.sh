# What every GPU round script on the device machine starts with, sourced from the repository
# root with the bundle in .gpu/ (bench/gpu_bundle.sh): $OUT (default /tmp/kiln-out) made, the
# bundle's environment (.gpu/env.sh), the bundle and the kernels tree readable by kilnd, and $py,
# the machine's Python (KILN_GPU_PYTHON, default /opt/torch/.venv/bin/python). Then a kilnd of
# the round's own:
#   start_kilnd DIR LOG [KERNELS]
#                         a daemon with its socket and gen dir in DIR, its cache the machine's
#                         shared one (KILN_TEST_CACHE_DIR, /tmp/kiln-cache from .gpu/env.sh;
#                         the cache key names the sources, so trees and daemons can share it)
#                         or, set empty, DIR's own, and this tree's
#                         kernels (or the KERNELS folder: bench/kernels_ab.sh), its output in
#                         LOG; waits for the socket (up to 10 s) and exports KILN_SOCKET
#   stop_kilnd            ends it (nothing when none was started)
# A daemon started with & is one of the script's jobs: a bare `wait` (for other background work)
# waits for it too, until the call's time limit. Wait for the PIDs you mean (`wait "$pid"`).
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
source .gpu/env.sh
chmod -R a+rX .gpu kernels
py=${KILN_GPU_PYTHON:-/opt/torch/.venv/bin/python}

kilnd_pid=
start_kilnd() {
  kilnd --socket "$1/kilnd.sock" --cache-dir "${KILN_TEST_CACHE_DIR:-$1/cache}" --gen-dir "$1/gen" --kernels-dir "${3:-$PWD/kernels}" \
    > "$2" 2>&1 &
  kilnd_pid=$!
  for _ in $(seq 100); do [[ -S $1/kilnd.sock ]] && break; sleep 0.1; done
  export KILN_SOCKET=$1/kilnd.sock
}
stop_kilnd() {
  if [[ -n $kilnd_pid ]]; then
    kill "$kilnd_pid"
    wait "$kilnd_pid" 2>/dev/null
  fi
  kilnd_pid=
}
