#!/usr/bin/env bash
# Instructions Kiln's host path runs per op call, without a GPU (docs/benchmarking.md): the op
# calls of kiln-host-path against the no-op CUDA driver (null_cuda_driver.cpp), kernels from the
# embedded engine into a fresh cache (filled by one run outside valgrind, so that the counted runs
# only read it), counted by callgrind as (CALLS calls) - (0 calls) over CALLS. Deterministic, unlike
# host time on a shared machine: the measure to compare commits by; kiln-bench --overhead on the
# GPU machine gives the microseconds. Needs valgrind (apt-get install valgrind).
#   bash bench/op/host_path.sh [BUILD_DIR] [CALLS]     (default build, 20000)
#   KEEP=DIR bash bench/op/host_path.sh ...             also keeps the callgrind files in DIR
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
export KILN_MODE=embedded KILN_CACHE_DIR=$work/cache KILN_KERNELS_DIR=$PWD/kernels
count() {  # count OP N: instructions of a run of N calls
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1.$2" "$bin" "$1" "$2" 2>&1 |
    awk '/Collected :/ {print $4}'
}
for op in silu_and_mul rms_norm; do
  "$bin" "$op" 1  # compiles the op's kernel into the cache
  many=$(count "$op" "$calls")
  none=$(count "$op" 0)
  echo "$op: $(( (many - none) / calls )) instructions per call ($calls calls, no-op driver, callgrind)"
done
if [[ -n ${KEEP:-} ]]; then mkdir -p "$KEEP" && cp "$work"/cg.* "$KEEP"/; fi
