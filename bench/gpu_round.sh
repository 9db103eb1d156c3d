#!/usr/bin/env bash
# The whole GPU round of the kernel library, on the device machine from the repository root
# with the bundle in .gpu/ (bench/gpu_bundle.sh; docs/building.md, docs/benchmarking.md): every
# [gpu] test of the client, kiln-bench --check (every op's routine against float64), then
# kiln-bench on the default cases (one per trace example of every op) with the op-call overhead
# benchmark, and bench/compare_torch.py (via bench/op/gpu_round.sh; it calls Kiln through the
# Python package, built there by bench/python_gpu.sh site from .gpu/python: run `bash
# bench/python_gpu.sh prepare BUILD_DIR` after bench/gpu_bundle.sh here). With two GPUs
# (nvidia-h200-x2) also the multi-GPU comm tests.
# Logs, JSON and CSV go to $OUT. A device command runs at most 10 minutes: run `tests`,
# `bench` and `torch` as separate commands.
#   bash bench/gpu_round.sh [tests|bench|torch|all|embedded|embedded-gemm]  (the embedded rounds: not part of all)
set -u
what=${1:-all}
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
source .gpu/env.sh  # PATH, LD_LIBRARY_PATH and the KILN_TEST_* paths of the bundle
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
chmod -R a+rX .gpu kernels

if [[ $what == tests || $what == all ]]; then
  for family in ops activation rope sampling decode diag gemm; do
    filter="[gpu][$family]"
    [[ $family == ops ]] && filter="[gpu][ops]~[activation]~[rope]~[sampling]~[decode]~[diag]~[gemm]"
    timeout 240 kiln_client_tests "$filter" -d yes > "$OUT/gpu-tests-$family.log" 2>&1
    echo "kiln_client_tests $filter rc=$?"
    grep -E "^[0-9.]+ s: |test cases|FAILED" "$OUT/gpu-tests-$family.log" | tail -12
  done
  rest="[gpu]~[ops]~[activation]~[rope]~[sampling]~[decode]~[diag]~[gemm]"
  timeout 120 kiln_client_tests "$rest" -d yes > "$OUT/gpu-tests-rest.log" 2>&1; echo "kiln_client_tests $rest rc=$?"
  grep -E "^[0-9.]+ s: |test cases|FAILED" "$OUT/gpu-tests-rest.log" | tail -8
  timeout 300 kiln_bench_tests "[gpu]" -d yes > "$OUT/gpu-tests-bench-check.log" 2>&1
  echo "kiln_bench_tests [gpu] (kiln-bench --check) rc=$?"
  grep -E "^[0-9.]+ s: |test cases|FAILED|checks: " "$OUT/gpu-tests-bench-check.log" | tail -6
  if [[ -x .gpu/bin/kiln_comm_gpu_tests ]]; then
    timeout 400 kiln_comm_gpu_tests -d yes > "$OUT/comm-gpu-tests.log" 2>&1; echo "kiln_comm_gpu_tests rc=$?"
    grep -E "test cases|passed|FAILED|error after|after [0-9.]+ s" "$OUT/comm-gpu-tests.log" | head -12
  fi
fi

# The op tests again with no daemon in the loop: KILN_MODE=embedded makes every kernel come from
# the embedded engine (compiled in the test process into a fresh cache folder; the daemons the
# tests start are not asked), then the embedded-engine, mode and doctor tests as they run in CI.
# gemm compiles every tactic of its space into the fresh cache (minutes): its own command,
# embedded-gemm, reusing the folder of the last embedded round while the machine is warm.
if [[ $what == embedded || $what == embedded-gemm ]]; then
  families="ops activation rope sampling decode prefill"
  budget=150
  if [[ $what == embedded-gemm ]]; then
    families=gemm
    budget=480
    cache=$(ls -d /tmp/kiln-embedded-* 2>/dev/null | head -1)
  fi
  [[ -n ${cache:-} ]] || cache=$(mktemp -d /tmp/kiln-embedded-XXXXXX)
  if [[ $what == embedded ]]; then
    timeout 120 kiln_client_tests "[embedded],[mode],[doctor]" -d yes > "$OUT/embedded-tests.log" 2>&1
    echo "kiln_client_tests [embedded],[mode],[doctor] rc=$?"
    grep -E "test cases|FAILED" "$OUT/embedded-tests.log" | tail -4
  fi
  for family in $families; do
    filter="[gpu][$family]"
    [[ $family == ops ]] && filter="[gpu][ops]~[activation]~[rope]~[sampling]~[decode]~[diag]~[gemm]~[prefill]"
    KILN_MODE=embedded KILN_CACHE_DIR="$cache" KILN_KERNELS_DIR="$PWD/kernels" KILN_LOADER_LOG=1 \
      timeout "$budget" kiln_client_tests "$filter" -d yes > "$OUT/embedded-gpu-tests-$family.log" 2>&1
    echo "KILN_MODE=embedded kiln_client_tests $filter rc=$?"
    grep -E "test cases|FAILED" "$OUT/embedded-gpu-tests-$family.log" | tail -4
    echo "  loader lines from the embedded engine: $(grep -c 'from the embedded engine' "$OUT/embedded-gpu-tests-$family.log")," \
      "rpc lines: $(grep -c '\[kiln loader\].*, rpc ' "$OUT/embedded-gpu-tests-$family.log")"
  done
fi

if [[ $what == bench || $what == all ]]; then
  bash bench/op/gpu_round.sh bench 2>&1 | tail -150
fi

if [[ $what == torch || $what == all ]]; then
  bash bench/op/gpu_round.sh torch 2>&1 | tail -150
fi
