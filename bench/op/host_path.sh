#!/usr/bin/env bash
# Instructions Kiln's host path runs per call, without a GPU (docs/benchmarking.md): the calls of
# kiln-host-path against the no-op CUDA driver (null_cuda_driver.cpp), counted by callgrind as
# (CALLS calls) - (0 calls) over CALLS. The ops (silu_and_mul, rms_norm, apply_rope, gemm and
# fp8_gemm at M 1: their GEMV kernels)
# get their kernels from the embedded engine into a fresh cache (filled by one run outside
# valgrind, so that the counted runs only read it); load_source (a warm fetch + verify + load,
# 40-kernel source) asks a kilnd of the build started on a fresh cache, over the same-node
# protocol, and counts the client's side.
# Deterministic, unlike host time on a shared machine: the measure to compare commits by;
# kiln-bench --overhead and kiln-bench-service on the GPU machine give the microseconds. Needs
# valgrind (apt-get install valgrind).
#   bash bench/op/host_path.sh [BUILD_DIR] [CALLS]     (default build, 20000)
#   KEEP=DIR bash bench/op/host_path.sh ...             also keeps the callgrind files in DIR
#   DAEMON=1 bash bench/op/host_path.sh ...             also counts kilnd's side of load_source
set -eu
build=${1:-build}
calls=${2:-20000}
bin=$build/bench/op/kiln-host-path
drv=$build/bench/op/null-driver
[[ -x $bin && -f $drv/libcuda.so.1 ]] || { echo "host_path.sh: build $bin and $drv/libcuda.so.1 first" >&2; exit 2; }
command -v valgrind > /dev/null || { echo "host_path.sh: needs valgrind" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH=$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KILN_MODE=embedded KILN_CACHE_DIR=$work/cache KILN_KERNELS_DIR=$PWD/kernels KILN_GEMM_GEMV=1 KILN_FP8_GEMM_GEMV=1
count() {  # count OP N: instructions of a run of N calls
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1.$2" "$bin" "$1" "$2" 2>&1 |
    awk '/Collected :/ {print $4}'
}
for op in silu_and_mul rms_norm apply_rope gemm fp8_gemm; do
  "$bin" "$op" 1  # compiles the op's kernel into the cache
  many=$(count "$op" "$calls")
  none=$(count "$op" 0)
  echo "$op: $(( (many - none) / calls )) instructions per call ($calls calls, no-op driver, callgrind)"
done
# The warm fetch against a daemon: the source compiled once (the first run), then counted.
"$build/server/kilnd" --socket "$work/kilnd.sock" --cache-dir "$work/daemon-cache" --gen-dir "$work/gen" \
  --kernels-dir "$PWD/kernels" > "$work/kilnd.log" 2>&1 &
kilnd_pid=$!
trap 'kill $kilnd_pid 2> /dev/null; wait $kilnd_pid 2> /dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do [[ -S $work/kilnd.sock ]] && break; sleep 0.1; done
export KILN_MODE=daemon KILN_SOCKET=$work/kilnd.sock
loads=$(( calls / 20 > 0 ? calls / 20 : 1 ))
"$bin" load_source 1
many=$(count load_source "$loads")
none=$(count load_source 0)
echo "load_source: $(( (many - none) / loads )) instructions per warm fetch+verify+load ($loads loads, client side)"
# DAEMON=1: the daemon's side of the same warm fetch, counted in a kilnd run under callgrind: only
# inside its same-node connection threads (LocalFetchServer::Run), less the reads that wait for
# the next request (ReadExact polls for it: a count of the waiting, not of the work).
if [[ ${DAEMON:-0} == 1 ]]; then
  kill $kilnd_pid 2> /dev/null; wait $kilnd_pid 2> /dev/null || true
  daemon_count() {  # daemon_count N: instructions of a kilnd that served one client's N+1 loads
    rm -f "$work/kilnd.sock"
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.kilnd.$1" --collect-atstart=no \
      --toggle-collect='kiln::server::LocalFetchServer::Run*' --toggle-collect='kiln::proto::ReadExact*' \
      "$build/server/kilnd" --socket "$work/kilnd.sock" --cache-dir "$work/daemon-cache" --gen-dir "$work/gen" \
      --kernels-dir "$PWD/kernels" > "$work/kilnd-cg.log" 2>&1 &
    kilnd_pid=$!
    for _ in $(seq 600); do [[ -S $work/kilnd.sock ]] && break; sleep 0.1; done
    "$bin" load_source "$1"
    kill $kilnd_pid; wait $kilnd_pid 2> /dev/null || true
    awk '/Collected :/ {print $4}' "$work/kilnd-cg.log"
  }
  many=$(daemon_count "$loads")
  none=$(daemon_count 0)
  echo "load_source: $(( (many - none) / loads )) instructions per warm request ($loads loads, daemon side)"
fi
if [[ -n ${KEEP:-} ]]; then mkdir -p "$KEEP" && cp "$work"/cg.* "$KEEP"/; fi
