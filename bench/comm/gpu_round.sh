#!/usr/bin/env bash
# One round of multi-GPU work on the two-H200 machine (device tool, kind nvidia-h200-x2), from
# the repository root with the bundle in .gpu/ (docs/building.md): the multi-GPU tests, the
# comm CPU tests, then Kiln's all-reduce against NCCL. Logs and JSON go to $OUT.
#   bash bench/comm/gpu_round.sh [tests|bench|all]
set -u
what=${1:-all}
source bench/gpu_kilnd.sh
export KILN_TEST_KILND=$PWD/.gpu/bin/kilnd KILN_TEST_CLI=$PWD/.gpu/bin/kiln \
  KILN_TEST_KERNELS_DIR=$PWD/kernels KILN_TEST_LAUNCH=$PWD/.gpu/bin/kiln-launch \
  KILN_TEST_COMM_RANK_TESTS=$PWD/.gpu/bin/kiln_comm_rank_tests
# NVLink multicast stays off on these machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv > "$OUT/gpus.csv" 2>&1
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1

if [[ $what == tests || $what == all ]]; then
  # The CPU comm tests travel only when the bundle names them (bench/gpu_bundle.sh build .gpu --
  # ... build/tests/client/kiln_comm_tests); they need no GPU and run in CI anyway.
  if command -v kiln_comm_tests >/dev/null; then
    timeout 60 kiln_comm_tests > "$OUT/comm-cpu-tests.log" 2>&1; echo "kiln_comm_tests rc=$?"
  else
    echo "kiln_comm_tests: not in the bundle (CPU tests; CI runs them)"
  fi
  timeout 400 kiln_comm_gpu_tests -d yes > "$OUT/comm-gpu-tests.log" 2>&1; echo "kiln_comm_gpu_tests rc=$?"
  grep -E "test cases|passed|failed|FAILED|error after|after [0-9.]+ s" "$OUT/comm-gpu-tests.log" | head -20
  timeout 120 kiln_client_tests "[gpu]" > "$OUT/client-gpu-tests.log" 2>&1; echo "kiln_client_tests [gpu] rc=$?"
  tail -2 "$OUT/client-gpu-tests.log"
fi

if [[ $what == bench || $what == all ]]; then
  dir=$(mktemp -d)
  start_kilnd "$dir" "$OUT/kilnd-bench.log"
  timeout 400 kiln-launch -n 2 python3 bench/comm/compare_nccl.py \
    --lib "$PWD/.gpu/bin/libkiln_client.so.0.1" --dtypes "${DTYPES:-bf16}" \
    --out "$OUT/all-reduce-vs-nccl.json" > "$OUT/all-reduce-vs-nccl.log" 2>&1
  echo "compare_nccl rc=$?"
  tail -30 "$OUT/all-reduce-vs-nccl.log"
  stop_kilnd
fi
