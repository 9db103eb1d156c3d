#!/usr/bin/env bash
# Issue 17's side-by-side rounds on the H200 (device tool), from the repository root with the
# bundle in .gpu/ (bench/gpu_bundle.sh, bench/python_gpu.sh prepare) and FlashInfer's site in
# /tmp/fisite (docs/benchmarking.md): a kilnd of its own, then per PART
#   small   bench/compare_torch.py on bench/op/small_batch.list (every wave-1 op at 1-16 tokens,
#           fp16 and bf16) with KILN_PDL=1, then Kiln alone with KILN_PDL=0 (--no-flashinfer)
#           (SMALL_OPS: a comma list of compare_torch's op names, default all)
#   decode  bench/compare_torch.py --ops batch_decode on its trace examples (uniform batches)
#   norms   bench/compare_torch.py --ops rms_norm,fused_add_rms_norm on their trace examples
#   ragged  bench/compare_torch.py --ops batch_decode on bench/decode/ragged.list
#   step    bench/decode_step.py (a whole decode step, Kiln PDL on and off, FlashInfer, PyTorch)
#   ncu     Nsight Compute's kernel durations (each kernel alone: no launch overlap) of the
#           compare_torch cases NCU_LIST (default: the 1-token bf16 lines of small_batch.list)
#           for the ops NCU_OPS (default rms_norm,fused_add_rms_norm), kernels matching the
#           regex NCU_KERNELS (default: the norms' names in Kiln and FlashInfer), metrics NCU_METRICS
#           (default: duration, DRAM bytes read, SM cycles)
# Logs and JSON in $OUT.
#   bash bench/wave1_round.sh PART...
set -u
source bench/gpu_kilnd.sh
site=$(bash bench/python_gpu.sh site)
export PYTHONPATH="$site${FISITE:+:$FISITE}"

dir=$(mktemp -d)
start_kilnd "$dir" "$OUT/kilnd-wave1.log"
for part in "$@"; do
  case $part in
    small)
      KILN_PDL=1 "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --list bench/op/small_batch.list \
        --ops "${SMALL_OPS:-all}" --out "$OUT/small-pdl1.json" > "$OUT/small-pdl1.log" 2>&1
      echo "small KILN_PDL=1: rc=$?"
      KILN_PDL=0 "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --list bench/op/small_batch.list \
        --ops "${SMALL_OPS:-all}" --no-flashinfer --out "$OUT/small-pdl0.json" > "$OUT/small-pdl0.log" 2>&1
      echo "small KILN_PDL=0: rc=$?" ;;
    decode)
      "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --ops batch_decode --out "$OUT/decode.json" \
        > "$OUT/decode.log" 2>&1
      echo "decode: rc=$?" ;;
    norms)
      "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --ops rms_norm,fused_add_rms_norm \
        --out "$OUT/norms.json" > "$OUT/norms.log" 2>&1
      echo "norms: rc=$?" ;;
    ragged)
      "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --ops batch_decode --list bench/decode/ragged.list \
        --out "$OUT/ragged.json" > "$OUT/ragged.log" 2>&1
      echo "ragged: rc=$?" ;;
    step)
      "$py" bench/decode_step.py --socket "$KILN_SOCKET" ${STEP_ARGS:-} --out "$OUT/step.json" \
        > "$OUT/step.log" 2>&1
      echo "step: rc=$?" ;;
    ncu)
      list=${NCU_LIST:-$dir/ncu.list}
      [ -n "${NCU_LIST:-}" ] || grep -E ' bf16 .* small-b1(-|$)' bench/op/small_batch.list > "$list"
      ncu --target-processes all -k "regex:${NCU_KERNELS:-(?i)rms}" -c "${NCU_COUNT:-40}" \
        --metrics "${NCU_METRICS:-gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_elapsed.max}" --csv \
        "$py" bench/compare_torch.py --socket "$KILN_SOCKET" --ops "${NCU_OPS:-rms_norm,fused_add_rms_norm}" \
        --list "$list" --calls 1 --max-calls 1 --reps 2 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
      echo "ncu: rc=$?" ;;
    *) echo "wave1_round.sh: unknown part '$part' (small, decode, norms, ragged, step, ncu)" >&2 ;;
  esac
done
stop_kilnd
