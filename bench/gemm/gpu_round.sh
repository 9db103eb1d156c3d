#!/usr/bin/env bash
# The gemm round on the H200 (device tool, kind nvidia-h200), from the repository root with
# the bundle in .gpu/ (bash bench/gpu_bundle.sh): the [gpu][gemm] client tests, then with a
# kilnd of its own kiln-bench on the issue's shapes (bench/gemm/llama31_8b.list: (N, K) of the
# Llama-3.1-8B linear layers x M 1..16384), on split-K at small M (bench/gemm/splits.list), on B
# multicast at large M (bench/gemm/multicast.list), on
# grouped_gemm against the dense gemm (bench/gemm/grouped.list, grouped_fp8.list) and on every tile
# (bench/gemm/tactics.list), and
# bench/compare_torch.py against cuBLAS on the same shapes. fp8: kiln-bench on bench/gemm/fp8.list
# and the bf16 shapes (the >= 1.7x target compares both in one run), and compare_torch against
# torch._scaled_mm (the fp8_gemm tests are part of "tests"). compare_torch calls Kiln through the
# Python package, built into /tmp/kiln-py by `bash bench/python_gpu.sh site` (it needs .gpu/python
# from `bash bench/python_gpu.sh prepare BUILD_DIR`, made beside the bundle, and the bundle's
# libkiln_client) and run with the machine's Python (KILN_GPU_PYTHON). Logs and JSON go to $OUT.
# `small-m`: bench/gemm/small_m.list (M 1-32) by default, with KILN_GEMM_GEMV_WIDE=1 (the wide GEMV
# kernel at M 17-32) and with KILN_GEMM_GEMV=0 (the tile kernel), side by side (not part of all).
# `fp8-small-m`: bench/gemm/fp8_small_m.list (fp8_gemm, M 1-16) by default, with each k-part count
# of the GEMV kernel forced and with KILN_FP8_GEMM_GEMV=0 (the tile kernel), side by side, then
# compare_torch against torch._scaled_mm on the same list (not part of all).
#   bash bench/gemm/gpu_round.sh [tests|bench|fp8|small-m|fp8-small-m|all]
set -u
what=${1:-all}
source bench/gpu_kilnd.sh

# The kiln package for compare_torch, built once per command: sets pythonpath, or says why not.
python_site() {
  pythonpath=$(bash bench/python_gpu.sh site 2> "$OUT/python-site.log") && return 0
  echo "compare_torch not run: bash bench/python_gpu.sh site failed:"
  cat "$OUT/python-site.log"
  return 1
}

if [[ $what == tests || $what == all ]]; then
  timeout 300 kiln_client_tests "[gpu][gemm]" -d yes > "$OUT/gemm-tests.log" 2>&1
  echo "kiln_client_tests [gpu][gemm] rc=$?"
  grep -E "^[0-9.]+ s: |test cases|FAILED" "$OUT/gemm-tests.log" | tail -8
fi

if [[ $what == fp8 ]]; then
  dir=$(mktemp -d)
  start_kilnd "$dir" "$OUT/kilnd-fp8.log"
  for list in fp8 llama31_8b; do
    timeout 200 kiln-bench --list "bench/gemm/$list.list" --out "$OUT/gemm-$list.json" > "$OUT/gemm-$list.log" 2>&1
    echo "kiln-bench --list bench/gemm/$list.list rc=$?"
    cat "$OUT/gemm-$list.log"
  done
  # torch._scaled_mm on the issue's shapes (the tile rows left out: the same shapes again).
  grep -v tiles- bench/gemm/fp8.list > "$dir/fp8-shapes.list"
  if python_site; then
    PYTHONPATH=$pythonpath timeout 240 "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --ops fp8_gemm \
      --list "$dir/fp8-shapes.list" --out "$OUT/fp8-compare-torch.json" > "$OUT/fp8-compare-torch.log" 2>&1
    echo "compare_torch --ops fp8_gemm rc=$?"
    cat "$OUT/fp8-compare-torch.log"
  fi
  stop_kilnd
fi

# kiln-bench on LIST once per variant (NAME or NAME=VAR=VALUE: that environment), with one kilnd,
# then the rows side by side (µs and % of copy per variant).
small_m_round() {
  local tag=$1 list=$2
  shift 2
  local dir names=()
  dir=$(mktemp -d)
  start_kilnd "$dir" "$OUT/kilnd-$tag.log"
  for variant in "$@"; do
    local name=${variant%%=*} env_args=()
    [[ $variant == *=* ]] && env_args=("${variant#*=}")
    names+=("$name")
    env "${env_args[@]}" timeout 150 kiln-bench --list "$list" --out "$OUT/$tag-$name.json" > "$OUT/$tag-$name.log" 2>&1
    echo "kiln-bench $list, $name (${env_args[*]:-defaults}): rc=$?"
  done
  stop_kilnd
  "$py" - "$OUT" "$tag" "${names[@]}" <<'PY' || true
import json, sys
out, tag, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = {}
for variant in variants:
    try:
        data = json.load(open(f"{out}/{tag}-{variant}.json"))["rows"]
    except (OSError, ValueError):
        continue
    for row in data:
        if row.get("backend") == "kiln" and row.get("status") == "ok":
            rows.setdefault(row.get("label") or row.get("shape"), {})[variant] = (row["median_us"], row["pct_of_copy"],
                                                                               row.get("refcheck"))
print(f"{'case':30}" + "".join(f" {v + ' us':>12} {'%copy':>6}" for v in variants))
nan = (float("nan"), float("nan"), None)
for case, v in rows.items():
    cells = "".join(f" {v.get(k, nan)[0]:12.2f} {v.get(k, nan)[1]:6.1f}" for k in variants)
    checks = {v.get(k, nan)[2] for k in variants}
    print(f"{case:30}{cells}  refcheck {'/'.join(sorted(str(c) for c in checks))}")
PY
}

if [[ $what == small-m ]]; then
  small_m_round gemm-small-m bench/gemm/small_m.list default wide=KILN_GEMM_GEMV_WIDE=1 tile=KILN_GEMM_GEMV=0
fi

if [[ $what == fp8-small-m ]]; then
  small_m_round fp8-small-m bench/gemm/fp8_small_m.list default parts2=KILN_FP8_GEMM_GEMV_K_PARTS=2 \
    parts4=KILN_FP8_GEMM_GEMV_K_PARTS=4 parts8=KILN_FP8_GEMM_GEMV_K_PARTS=8 tile=KILN_FP8_GEMM_GEMV=0
  # The same shapes against torch._scaled_mm (per-tensor scales, cuBLASLt), Kiln with its defaults.
  if python_site; then
    dir=$(mktemp -d)
    start_kilnd "$dir" "$OUT/kilnd-fp8-small-m-torch.log"
    PYTHONPATH=$pythonpath timeout 200 "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --ops fp8_gemm \
      --list bench/gemm/fp8_small_m.list --out "$OUT/fp8-small-m-compare-torch.json" \
      > "$OUT/fp8-small-m-compare-torch.log" 2>&1
    echo "compare_torch --ops fp8_gemm --list bench/gemm/fp8_small_m.list rc=$?"
    cat "$OUT/fp8-small-m-compare-torch.log"
    stop_kilnd
  fi
fi

if [[ $what == bench || $what == all ]]; then
  dir=$(mktemp -d)
  start_kilnd "$dir" "$OUT/kilnd-gemm.log"
  for list in llama31_8b fp8 splits multicast grouped grouped_fp8 tactics; do
    timeout 200 kiln-bench --list "bench/gemm/$list.list" --out "$OUT/gemm-$list.json" > "$OUT/gemm-$list.log" 2>&1
    echo "kiln-bench --list bench/gemm/$list.list rc=$?"
    cat "$OUT/gemm-$list.log"
  done
  if python_site; then
    PYTHONPATH=$pythonpath timeout 300 "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --ops gemm \
      --list bench/gemm/llama31_8b.list --out "$OUT/gemm-compare-torch.json" > "$OUT/gemm-compare-torch.log" 2>&1
    echo "compare_torch --ops gemm rc=$?"
    cat "$OUT/gemm-compare-torch.log"
    PYTHONPATH=$pythonpath timeout 240 "$py" bench/compare_torch.py --socket "$KILN_SOCKET" \
      --ops grouped_gemm,grouped_gemm_masked --list bench/gemm/grouped.list --out "$OUT/grouped-compare-torch.json" \
      > "$OUT/grouped-compare-torch.log" 2>&1
    echo "compare_torch --ops grouped_gemm,grouped_gemm_masked rc=$?"
    cat "$OUT/grouped-compare-torch.log"
  fi
  stop_kilnd
fi
