#!/usr/bin/env bash
# One benchmark round on the H200 (device tool, kind nvidia-h200), from the repository root
# with the bundle in .gpu/ (docs/benchmarking.md has the bundle recipe): a kilnd of its own,
# then kiln-bench on the default cases (--traces kernels/traces: one per example of every trace
# definition) or a test list, kiln-bench --overhead (op-call overhead against a raw cuLaunchKernelEx),
# and bench/compare_torch.py (Kiln through the Python package: the site /tmp/kiln-py built by
# `bash bench/python_gpu.sh site`, which needs .gpu/python from `bash bench/python_gpu.sh prepare
# BUILD_DIR` made beside the bundle, and the bundle's libkiln_client; run with the machine's
# Python, KILN_GPU_PYTHON, default /opt/torch/.venv/bin/python). Logs, JSON and CSV go to $OUT.
#   bash bench/op/gpu_round.sh [bench|overhead|torch|all] [LIST] [COMPARE_TORCH_ARGS...]
# One device command runs at most 10 minutes: give `bench` and `torch` a command each (`all`
# may not fit); a LIST of some routines (kiln-bench --generate-list kernels/traces | grep ...) runs
# a part.
set -u
what=${1:-all}
list=${2:-}  # empty: the default cases of kernels/traces
shift $(( $# < 2 ? $# : 2 ))
source bench/gpu_kilnd.sh
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.csv" 2>&1

dir=$(mktemp -d)
start_kilnd "$dir" "$OUT/kilnd-bench.log"

if [[ $what == bench || $what == all ]]; then
  cases=(--traces kernels/traces)
  [[ -n $list ]] && cases=(--list "$list")
  timeout 520 kiln-bench "${cases[@]}" --out "$OUT/kiln-bench.json" --out "$OUT/kiln-bench.csv" \
    > "$OUT/kiln-bench.log" 2>&1
  echo "kiln-bench rc=$?"
  cat "$OUT/kiln-bench.log"
fi

if [[ $what == overhead || $what == bench || $what == all ]]; then
  # Logging off: the target is "within 0.2 us of a raw cuLaunchKernelEx" with KILN_LOGLEVEL unset.
  env -u KILN_LOGLEVEL timeout 120 kiln-bench --overhead --out "$OUT/kiln-bench-overhead.json" \
    --out "$OUT/kiln-bench-overhead.csv" > "$OUT/kiln-bench-overhead.log" 2>&1
  echo "kiln-bench --overhead rc=$?"
  cat "$OUT/kiln-bench-overhead.log"
fi

if [[ $what == torch || $what == all ]]; then
  if pythonpath=$(bash bench/python_gpu.sh site 2> "$OUT/python-site.log"); then
    PYTHONPATH=$pythonpath timeout 520 "${KILN_GPU_PYTHON:-/opt/torch/.venv/bin/python}" bench/compare_torch.py \
      --socket "$KILN_SOCKET" --out "$OUT/compare-torch.json" "$@" > "$OUT/compare-torch.log" 2>&1
    echo "compare_torch rc=$?"
    cat "$OUT/compare-torch.log"
  else
    echo "compare_torch not run: bash bench/python_gpu.sh site failed:"
    cat "$OUT/python-site.log"
  fi
fi

stop_kilnd
