#!/usr/bin/env bash
# Makes the folder that carries Kiln's binaries to the GPU machine (device tool, H200). That
# machine has CUDA 13.0 and a driver but none of the libraries gRPC, protobuf, abseil, spdlog,
# fmt, SQLite or OpenSSL come in, and nothing can be installed there; so the bundle holds the
# stripped executables (bin/) and every shared library they need beyond the C/C++ runtime and
# CUDA (lib/), plus env.sh, which puts both on the paths.
#
#   bash bench/gpu_bundle.sh [BUILD_DIR [OUT_DIR]] [-- EXTRA_FILE...]
#
# BUILD_DIR defaults to build, OUT_DIR to .gpu (git-ignored: name it in the device call's
# `carry`). Without extra files it takes everything a GPU round uses: the daemon, the CLI,
# kiln-launch, kiln-bench, kiln-bench-service, libkiln_client.so and the test binaries with
# [gpu] cases. The carry limit is 64 MiB in all, so unstripped binaries would not fit.
# There: `source .gpu/env.sh`, then bench/op/gpu_round.sh or the test commands of
# docs/building.md. What runs Kiln from Python there (bench/compare_torch.py, the package's tests:
# bench/python_gpu.sh site / run) also needs .gpu/python: `bash bench/python_gpu.sh prepare
# BUILD_DIR` after this script (which empties OUT_DIR), with libkiln_client in the bundle.
set -euo pipefail
build=build
out=.gpu
if [[ $# -gt 0 && $1 != -- ]]; then build=$1; shift; fi
if [[ $# -gt 0 && $1 != -- ]]; then out=$1; shift; fi
[[ ${1:-} == -- ]] && shift
files=("$@")
if [[ ${#files[@]} -eq 0 ]]; then
  files=(server/kilnd client/kiln client/kiln-launch bench/op/kiln-bench
         bench/service/kiln-bench-service tests/client/kiln_client_tests tests/bench/kiln_bench_tests
         tests/client/kiln_diag_child tests/client/kiln_embedded_child tests/client/comm/gpu/kiln_comm_rank_tests
         tests/client/comm/gpu/kiln_comm_gpu_tests)
  lib=$(cd "$build" && ls client/libkiln_client.so.*.* 2>/dev/null | head -1 || true)
  [[ -n $lib ]] && files+=("$lib")
  files=("${files[@]/#/$build/}")
fi

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
# Provided by the GPU machine itself: the C/C++ runtime and the CUDA driver and toolkit
# (NVRTC and nvJitLink come from its /usr/local/cuda/lib64, which env.sh puts on the path).
provided='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnvrtc|libnvJitLink|libcudart|libcupti|libcublas|libnccl)'
for f in "${files[@]}"; do
  [[ -f $f ]] || { echo "gpu_bundle.sh: $f does not exist (build it first)" >&2; exit 1; }
  cp -f "$f" "$out/bin/"
  strip --strip-debug "$out/bin/$(basename "$f")"
  ldd "$f" | awk '/=>/ && $3 != "" {print $1, $3}' | while read -r name path; do
    [[ $name =~ $provided ]] && continue
    [[ -e $out/lib/$name ]] && continue
    cp -L "$path" "$out/lib/$name"
    strip --strip-debug "$out/lib/$name"
  done
done
# The client library is found by its soname, as a consumer would load it.
for so in "$out"/bin/libkiln_client.so.*; do
  [[ -e $so ]] || continue
  soname=$(objdump -p "$so" | awk '/SONAME/ {print $2}')
  [[ -n $soname && ! -e $out/bin/$soname ]] && ln -s "$(basename "$so")" "$out/bin/$soname"
done
cat > "$out/env.sh" <<'ENV'
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$bundle/lib:$bundle/bin:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bundle/bin:$PATH"
# The test binaries find the daemon, the CLI and the kernels through these (there is no build
# tree there).
export KILN_TEST_KILND="$bundle/bin/kilnd" KILN_TEST_CLI="$bundle/bin/kiln"
export KILN_TEST_DIAG_CHILD="$bundle/bin/kiln_diag_child" KILN_TEST_LAUNCH="$bundle/bin/kiln-launch"
export KILN_TEST_EMBEDDED_CHILD="$bundle/bin/kiln_embedded_child"
export KILN_TEST_COMM_RANK_TESTS="$bundle/bin/kiln_comm_rank_tests" KILN_TEST_KILN_BENCH="$bundle/bin/kiln-bench"
export KILN_TEST_KERNELS_DIR="$(cd "$bundle/.." && pwd)/kernels"
# One compile cache for every test case's kilnd and every round's (bench/gpu_kilnd.sh), kept in
# /tmp (which outlives a device command while the machine stays warm): a kernel compiles once,
# not once a test case, round and command. Set it empty for a fresh cache each time.
export KILN_TEST_CACHE_DIR="${KILN_TEST_CACHE_DIR-/tmp/kiln-cache}"
ENV
unresolved=$(for e in "$out"/bin/*; do
  [[ -L $e ]] && continue
  LD_LIBRARY_PATH="$out/lib:$out/bin:/usr/local/cuda/lib64" ldd "$e" | grep 'not found' || true
done)
[[ -z $unresolved ]] || { echo "gpu_bundle.sh: libraries not found:" >&2; echo "$unresolved" >&2; exit 1; }
size=$(du -sm "$out" | cut -f1)
echo "gpu_bundle.sh: $out holds ${#files[@]} files and their libraries, $size MiB"
[[ $size -lt 60 ]] || echo "gpu_bundle.sh: warning: over 60 MiB, the device carry limit is 64 MiB with the tree" >&2
