#!/usr/bin/env bash
# The prefill round on the H200 (device tool, kind nvidia-h200), from the repository root with
# the bundle in .gpu/ (bash bench/gpu_bundle.sh): the [gpu][prefill] client tests, then with a
# kilnd of its own kiln-bench on the cases (bench/prefill/prefill.list, refcheck on) and
# bench/compare_torch.py against PyTorch SDPA's flash and cuDNN backends on its ragged rows
# (q_len == kv_len, causal), Kiln through the Python package: built into /tmp/kiln-py by
# `bash bench/python_gpu.sh site` (it needs .gpu/python from `bash bench/python_gpu.sh prepare
# BUILD_DIR`, made beside the bundle, and the bundle's libkiln_client), run with the machine's
# Python (KILN_GPU_PYTHON, default /opt/torch/.venv/bin/python). Logs and JSON go to $OUT.
# `tma`: the rows the Hopper kernel serves with TMA (head_dim 64 and 128; ragged, and the paged
# rows but speculative verification, which takes the mma.sync kernel) with its TMA producer
# (KILN_PREFILL_TMA_KV=1, the default) and with cp.async (=0), TMA_ROUNDS times (default 1)
# alternating, in one kilnd: the evidence for the default. TMA_ROWS: an extended regex the rows
# must match (default: all of them). `peers`: compare_torch alone on the head_dim 128 ragged rows
# and the paged rows (batch_prefill_paged), with FlashInfer's prefill wrappers (FA3 on sm_90) when
# its site is in FISITE (docs/benchmarking.md: the wheel unpacked outside the tree; its first
# call JIT-compiles the module with the machine's nvcc, about 100 s on 16 cores).
#   bash bench/prefill/gpu_round.sh [tests|bench|tma|peers|all]
set -u
what=${1:-all}
source bench/gpu_kilnd.sh

if [[ $what == tests || $what == all ]]; then
  timeout 250 kiln_client_tests "[gpu][prefill]" -d yes > "$OUT/prefill-tests.log" 2>&1
  echo "kiln_client_tests [gpu][prefill] rc=$?"
  grep -E "^[0-9.]+ s: |test cases|FAILED" "$OUT/prefill-tests.log" | tail -10
fi

if [[ $what == bench || $what == all ]]; then
  dir=$(mktemp -d)
  start_kilnd "$dir" "$OUT/kilnd-prefill.log"
  timeout 200 kiln-bench --list bench/prefill/prefill.list --out "$OUT/prefill-kiln-bench.json" \
    > "$OUT/prefill-kiln-bench.log" 2>&1
  echo "kiln-bench --list bench/prefill/prefill.list rc=$?"
  cat "$OUT/prefill-kiln-bench.log"
  grep "^batch_prefill_ragged" bench/prefill/prefill.list > "$dir/ragged.list"
  if pythonpath=$(bash bench/python_gpu.sh site 2> "$OUT/python-site.log"); then
    PYTHONPATH=$pythonpath timeout 420 "${KILN_GPU_PYTHON:-/opt/torch/.venv/bin/python}" bench/compare_torch.py \
      --socket "$KILN_SOCKET" --ops batch_prefill_ragged --list "$dir/ragged.list" \
      --out "$OUT/prefill-compare-torch.json" > "$OUT/prefill-compare-torch.log" 2>&1
    echo "compare_torch --ops batch_prefill_ragged rc=$?"
    cat "$OUT/prefill-compare-torch.log"
  else
    echo "compare_torch not run: bash bench/python_gpu.sh site failed:"
    cat "$OUT/python-site.log"
  fi
  stop_kilnd
fi

if [[ $what == tma ]]; then
  dir=$(mktemp -d)
  start_kilnd "$dir" "$OUT/kilnd-prefill-tma.log"
  grep -E "^batch_prefill_(ragged|paged) .*head_dim=(64|128)," bench/prefill/prefill.list | grep -v verify |
    grep -E "${TMA_ROWS:-.}" > "$dir/tma.list"
  for round in $(seq "${TMA_ROUNDS:-1}"); do
    for tma in 1 0; do
      KILN_PREFILL_TMA_KV=$tma timeout 240 kiln-bench --list "$dir/tma.list" \
        --out "$OUT/prefill-tma$tma-round$round.json" > "$OUT/prefill-tma$tma-round$round.log" 2>&1
      echo "KILN_PREFILL_TMA_KV=$tma round $round rc=$?"
      grep -vE "^#|^$" "$OUT/prefill-tma$tma-round$round.log" | cut -c1-230
    done
  done
  stop_kilnd
fi

if [[ $what == peers ]]; then
  dir=$(mktemp -d)
  start_kilnd "$dir" "$OUT/kilnd-prefill-peers.log"
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH=/usr/local/cuda/bin:$PATH MAX_JOBS=${MAX_JOBS:-16}
  grep "^batch_prefill_ragged" bench/prefill/prefill.list | grep "head_dim=128," > "$dir/ragged.list"
  grep "^batch_prefill_paged" bench/prefill/prefill.list > "$dir/paged.list"
  if pythonpath=$(bash bench/python_gpu.sh site 2> "$OUT/python-site.log"); then
    for op in ragged paged; do
      PYTHONPATH=$pythonpath${FISITE:+:$FISITE} timeout 420 "${KILN_GPU_PYTHON:-/opt/torch/.venv/bin/python}" \
        bench/compare_torch.py --socket "$KILN_SOCKET" --ops batch_prefill_$op --list "$dir/$op.list" \
        --out "$OUT/prefill-peers-$op.json" > "$OUT/prefill-peers-$op.log" 2>&1
      echo "compare_torch --ops batch_prefill_$op rc=$?"
      grep -vE "^# kiln" "$OUT/prefill-peers-$op.log" | cut -c1-200
    done
  else
    echo "compare_torch not run: bash bench/python_gpu.sh site failed:"
    cat "$OUT/python-site.log"
  fi
  stop_kilnd
fi
