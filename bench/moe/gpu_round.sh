#!/usr/bin/env bash
# The moe round on the H200 (device tool, kind nvidia-h200), from the repository root with the
# bundle in .gpu/ (bash bench/gpu_bundle.sh; for compare_torch also .gpu/python, bash
# bench/python_gpu.sh prepare BUILD_DIR): the moe family's GPU tests and the grouped GEMM's
# silu_and_mul epilogue test, kiln-bench --check of the moe routines, then with a kilnd of its
# own kiln-bench on the moe ops' default cases (the trace examples: Mixtral-8x7B, Qwen3-30B-A3B,
# DeepSeek-V3) with the dense GEMMs of equal FLOPs (bench/moe/dense_equal_flops.list), and
# bench/compare_torch.py for fused_moe against the PyTorch layers (and FlashInfer's fused MoE
# where its wheel is installed: PYTHONPATH extended by KILN_FLASHINFER_SITE). Logs and JSON go to
# $OUT. `paths`: fused_moe's decode-size cases (bench/moe/decode_paths.list, or PATH_LIST) under
# KILN_FUSED_MOE_PATH=gemv (programmatic launches on and off) and =grouped, PATH_ROUNDS times
# (default 1), alternating: the evidence for the default rule and for KILN_FUSED_MOE_PDL
# (PATH_VARIANTS: words of a path, gemv or grouped, with -nopdl (KILN_FUSED_MOE_PDL=0) and/or -fold
# (KILN_FUSED_MOE_FOLD=1) appended, then -g1 or -g2 forcing the folded down GEMV's column groups
# (KILN_FUSED_MOE_DOWN_COLUMN_GROUPS), or -onegrid (KILN_FUSED_MOE_ONE_GRID=1) with an optional
# -lagN (KILN_FUSED_MOE_ONE_GRID_LAG=N); default "gemv grouped gemv-nopdl"; "gemv gemv-fold
# gemv-fold-g1" for the folded combine, "gemv gemv-onegrid gemv-onegrid-lag256" for the one grid). `permute`: moe_permute across its
# single-block/multi-block threshold and up to 131k slots (bench/moe/permute_sizes.list).
# `prefill`: the prefill layers and their grouped GEMMs (bench/moe/prefill_grouped.list) with the
# grouped TMA stores as the rule has them and with KILN_GEMM_TMA_STORE=0, PATH_ROUNDS times
# alternating, the dense GEMMs of equal FLOPs, then (where ncu is installed) Nsight Compute's
# view of Qwen3-30B-A3B's two grouped GEMMs: DRAM and tensor-pipe throughput, stalls. `fp8`:
# fused_moe_fp8's GPU tests, kiln-bench --check at its check shapes, then its trace examples
# (Qwen3-30B-A3B-FP8, DeepSeek-V3) beside fused_moe's bf16 rows of the same layers and the dense
# fp8 GEMMs of equal FLOPs (bench/moe/dense_fp8_equal_flops.list). `fp8-paths` (a device call
# of its own): fused_moe_fp8's decode sizes (bench/moe/fp8_decode_paths.list) on each path
# (KILN_FUSED_MOE_PATH=gemv, with and without KILN_FUSED_MOE_FP8_PREFETCH=4, and =grouped;
# FP8_PATH_VARIANTS, which also take KILN_FUSED_MOE_FP8_K_PARTS).
#   bash bench/moe/gpu_round.sh [tests|bench|torch|measure (bench and torch)|paths|permute|prefill|fp8|fp8-paths|all]
set -u
what=${1:-all}
source bench/gpu_kilnd.sh

if [[ $what == tests || $what == all ]]; then
  timeout 400 kiln_client_tests "[gpu][moe]" -d yes > "$OUT/moe-tests.log" 2>&1
  echo "kiln_client_tests [gpu][moe] rc=$?"
  grep -E "^[0-9.]+ s: |test cases|FAILED" "$OUT/moe-tests.log" | tail -40
fi

# kiln-bench's table with the fp8 layers' derived axes (block counts, workspace bytes) dropped,
# so that the timing columns fit a line of the device call's output.
shorten_shapes() {
  sed -E 's/,gate_up=[0-9]+,hidden_blocks=[0-9]+,gate_up_blocks=[0-9]+,intermediate_blocks=[0-9]+,workspace_bytes=[0-9]+//'
}

dir=$(mktemp -d)
if [[ $what != tests ]]; then
  start_kilnd "$dir" "$OUT/kilnd-moe.log"
fi

if [[ $what == bench || $what == measure || $what == all ]]; then
  timeout 200 kiln-bench --check --only moe_route,moe_permute,moe_unpermute,fused_moe > "$OUT/moe-check.log" 2>&1
  echo "kiln-bench --check (moe) rc=$?"
  grep -E "FAIL|^#" "$OUT/moe-check.log"
  kiln-bench --generate-list kernels/traces | grep -E "^(moe_|fused_moe)" > "$dir/moe.list"
  cat bench/moe/dense_equal_flops.list >> "$dir/moe.list"
  timeout 300 kiln-bench --list "$dir/moe.list" --out "$OUT/moe.json" > "$OUT/moe.log" 2>&1
  echo "kiln-bench --list (moe default cases, dense GEMMs of equal FLOPs) rc=$?"
  cat "$OUT/moe.log"
fi

if [[ $what == paths || $what == all ]]; then
  # variant = KILN_FUSED_MOE_PATH[-nopdl][-fold[-g1|-g2]][-onegrid[-lagN]]; rounds alternate the variants
  # (PATH_ROUNDS, default 1).
  read -r -a variants <<< "${PATH_VARIANTS:-gemv grouped gemv-nopdl}"
  for round in $(seq "${PATH_ROUNDS:-1}"); do
    for variant in "${variants[@]}"; do
      pdl=1 fold=0 groups=auto one_grid=0 lag=auto
      [[ $variant == *-nopdl* ]] && pdl=0
      [[ $variant == *-fold* ]] && fold=1
      [[ $variant == *-g1* ]] && groups=1
      [[ $variant == *-g2* ]] && groups=2
      [[ $variant == *-onegrid* ]] && one_grid=1
      [[ $variant =~ -lag([0-9]+) ]] && lag=${BASH_REMATCH[1]}
      KILN_FUSED_MOE_PATH=${variant%%-*} KILN_FUSED_MOE_PDL=$pdl KILN_FUSED_MOE_FOLD=$fold KILN_FUSED_MOE_ONE_GRID=$one_grid \
        KILN_FUSED_MOE_ONE_GRID_LAG=$lag \
        KILN_FUSED_MOE_DOWN_COLUMN_GROUPS=$groups timeout 200 kiln-bench \
        --list "${PATH_LIST:-bench/moe/decode_paths.list}" --out "$OUT/fused-moe-$variant-$round.json" \
        > "$OUT/fused-moe-$variant-$round.log" 2>&1
      echo "kiln-bench fused_moe decode cases, $variant, round $round: rc=$?"
    done
  done
  "$py" - "$OUT" "${variants[@]}" <<'PY' || true
import glob, json, statistics, sys
out, variants = sys.argv[1], sys.argv[2:]
rows = {}
for variant in variants:
    for name in sorted(glob.glob(f"{out}/fused-moe-{variant}-*.json")):
        for row in json.load(open(name))["rows"]:
            if row.get("backend") == "kiln" and row.get("status") == "ok":
                v = rows.setdefault(row.get("label") or row.get("shape"), {}).setdefault(variant, [])
                v.append((row["median_us"], row["pct_of_copy"]))
print(f"{'case':28}" + "".join(f" {v + ' us':>15} {'%copy':>6}" for v in variants))
for case, v in rows.items():
    cells = ""
    for variant in variants:
        got = v.get(variant, [(float("nan"), float("nan"))])
        cells += f" {statistics.mean(g[0] for g in got):15.1f} {statistics.mean(g[1] for g in got):6.1f}"
    print(f"{case:28}{cells}")
PY
fi

if [[ $what == prefill ]]; then
  for round in $(seq "${PATH_ROUNDS:-1}"); do
    for store in 1 0; do
      KILN_GEMM_TMA_STORE=$store timeout 120 kiln-bench --list bench/moe/prefill_grouped.list \
        --out "$OUT/prefill-store$store-$round.json" > "$OUT/prefill-store$store-$round.log" 2>&1
      echo "kiln-bench prefill_grouped.list, KILN_GEMM_TMA_STORE=$store, round $round: rc=$?"
    done
  done
  timeout 120 kiln-bench --list bench/moe/dense_equal_flops.list --out "$OUT/prefill-dense.json" \
    > "$OUT/prefill-dense.log" 2>&1
  echo "kiln-bench dense_equal_flops.list rc=$?"
  "$py" - "$OUT" <<'PY' || true
import glob, json, statistics, sys
out = sys.argv[1]
rows = {}
for kind in ("store1", "store0", "dense"):
    for name in sorted(glob.glob(f"{out}/prefill-{kind}*.json")):
        for row in json.load(open(name))["rows"]:
            if row.get("backend") == "kiln" and row.get("status") == "ok":
                rows.setdefault(row.get("label") or row.get("shape"), {}).setdefault(kind, []).append(row["median_us"])
for case, v in rows.items():
    print(f"{case:36}" + "".join(f"  {k}: " + " / ".join(f"{m:.1f}" for m in v[k]) + " us" for k in v))
PY
  if command -v ncu > /dev/null; then
    for shape in "t=32768,e=128,n=1536,k=2048,indptr_len=129" "t=32768,e=128,n=2048,k=768,indptr_len=129"; do
      log=$OUT/ncu-grouped-${shape%%,indptr*}.log
      timeout 200 ncu --kernel-name "regex:^kiln_grouped_gemm" --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \
        kiln-bench --routine grouped_gemm --shapes "$shape" --dtype bf16 --backends kiln --iters 5 --warmup 2 \
        > "$log" 2>&1
      echo "ncu grouped_gemm $shape rc=$?"
      grep -E "Duration|Throughput|dram__bytes|hmma|Stall" "$log" | head -30
    done
  else
    echo "ncu: not installed here, the profile is skipped"
  fi
fi

if [[ $what == fp8 ]]; then
  timeout 240 kiln_client_tests "[moe][fp8]" -d yes > "$OUT/moe-fp8-tests.log" 2>&1
  echo "kiln_client_tests [moe][fp8] rc=$?"
  grep -E "^[0-9.]+ s: |test cases|FAILED|  act|  out|  expert_out|codes differ" "$OUT/moe-fp8-tests.log" | head -40
  timeout 120 kiln-bench --check --only fused_moe_fp8 > "$OUT/moe-fp8-check.log" 2>&1
  echo "kiln-bench --check --only fused_moe_fp8 rc=$?"
  grep -E "FAIL|^#" "$OUT/moe-fp8-check.log"
  kiln-bench --generate-list kernels/traces | grep -E "^fused_moe_fp8" > "$dir/fp8.list"
  kiln-bench --generate-list kernels/traces | grep -E "^fused_moe " | grep -E "qwen3|deepseek" >> "$dir/fp8.list"
  grep -v "^#" bench/moe/dense_fp8_equal_flops.list >> "$dir/fp8.list"
  timeout 400 kiln-bench --list "$dir/fp8.list" --out "$OUT/moe-fp8.json" > "$OUT/moe-fp8.log" 2>&1
  echo "kiln-bench fused_moe_fp8 and bf16 rows rc=$?"
  shorten_shapes < "$OUT/moe-fp8.log"
fi

if [[ $what == fp8-paths ]]; then
  # The two paths at decode sizes, alternating (PATH_ROUNDS, default 1): the evidence for
  # FusedMoeFp8GemvSuits. Each row's timing is capped at 0.4 s (the reference's rows are slow; the
  # first H100 round's three variants did not fit one device call at the default 2 s).
  # FP8_PATH_VARIANTS: words of a path, gemv or grouped, with -pN appended for
  # KILN_FUSED_MOE_FP8_PREFETCH=N (the decode GEMVs' L2 prefetching) and/or -kN for
  # KILN_FUSED_MOE_FP8_K_PARTS=N (the warps sharing a row group's k blocks: 2, 4 or 8).
  # FP8_PATH_LIST: another list of its rows (default bench/moe/fp8_decode_paths.list).
  read -r -a fp8_variants <<< "${FP8_PATH_VARIANTS:-gemv gemv-p4 grouped}"
  for round in $(seq "${PATH_ROUNDS:-1}"); do
    for variant in "${fp8_variants[@]}"; do
      prefetch=auto k_parts=auto
      [[ $variant =~ -p([0-9]+) ]] && prefetch=${BASH_REMATCH[1]}
      [[ $variant =~ -k([0-9]+) ]] && k_parts=${BASH_REMATCH[1]}
      KILN_FUSED_MOE_PATH=${variant%%-*} KILN_FUSED_MOE_FP8_PREFETCH=$prefetch KILN_FUSED_MOE_FP8_K_PARTS=$k_parts timeout 170 \
        kiln-bench --max-seconds 0.4 --list "${FP8_PATH_LIST:-bench/moe/fp8_decode_paths.list}" \
        --out "$OUT/moe-fp8-paths-$variant-$round.json" > "$OUT/moe-fp8-paths-$variant-$round.log" 2>&1
      echo "kiln-bench fp8 decode sizes, $variant, round $round: rc=$?"
      grep -v "^kiln: KILN_FUSED_MOE_" "$OUT/moe-fp8-paths-$variant-$round.log" | grep -E "^(#|fused_moe_fp8 +kiln|error)" | shorten_shapes
    done
  done
fi

if [[ $what == permute || $what == all ]]; then
  timeout 200 kiln-bench --list bench/moe/permute_sizes.list --out "$OUT/moe-permute-sizes.json" \
    > "$OUT/moe-permute-sizes.log" 2>&1
  echo "kiln-bench moe_permute sizes rc=$?"
  cat "$OUT/moe-permute-sizes.log"
fi

if [[ $what == torch || $what == measure || $what == all ]]; then
  if pythonpath=$(bash bench/python_gpu.sh site 2> "$OUT/python-site.log"); then
    # The issue's layers (Mixtral-8x7B, Qwen3-30B-A3B); DeepSeek-V3's 22 GB of experts: kiln-bench.
    kiln-bench --generate-list kernels/traces | grep -E "^fused_moe" | grep -v deepseek > "$dir/fused-moe.list"
    PYTHONPATH=$pythonpath timeout 400 "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --ops fused_moe \
      --list "$dir/fused-moe.list" --out "$OUT/fused-moe-compare-torch.json" > "$OUT/fused-moe-compare-torch.log" 2>&1
    echo "compare_torch --ops fused_moe rc=$?"
    cat "$OUT/fused-moe-compare-torch.log"
  else
    echo "compare_torch not run: bash bench/python_gpu.sh site failed:"
    cat "$OUT/python-site.log"
  fi
fi

stop_kilnd
exit 0
