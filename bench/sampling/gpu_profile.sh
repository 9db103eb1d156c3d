#!/usr/bin/env bash
# Where a sampler's time goes on the H200 (device tool, repository root, bundle in .gpu/):
# kiln-bench on the sampling cases of the default list, then Nsight Compute on one launch of
# each kernel named in PROFILE_KERNELS at each batch in PROFILE_BATCHES (speed of light, warp
# stalls, the source lines that stall most). Logs go to $OUT.
#   bash bench/sampling/gpu_profile.sh [bench|ncu|all]
set -u
what=${1:-all}
source bench/gpu_kilnd.sh

dir=$(mktemp -d)
start_kilnd "$dir" "$OUT/kilnd-profile.log"

list=$OUT/sampling.list
kiln-bench --generate-list kernels/traces | grep -E '^(top_k_sampling|top_p_sampling|top_k_top_p_sampling|min_p_sampling|argmax) ' \
  > "$list"
if [[ $what == bench || $what == all ]]; then
  timeout 300 kiln-bench --list "$list" --out "$OUT/sampling.json" > "$OUT/sampling-bench.log" 2>&1
  echo "kiln-bench rc=$?"
  cat "$OUT/sampling-bench.log"
fi
if [[ $what == ncu || $what == all ]]; then
  for op in ${PROFILE_OPS:-top_k_sampling top_p_sampling}; do
    for batch in ${PROFILE_BATCHES:-1 128}; do
      log=$OUT/ncu-$op-b$batch.log
      timeout 200 ncu --kernel-name "regex:^kiln_${op}" --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
        --section InstructionStats --section MemoryWorkloadAnalysis \
        kiln-bench --routine "$op" --shapes "batch=$batch,vocab=128256" --dtype fp32 --backends kiln --iters 5 --warmup 2 \
        > "$log" 2>&1
      echo "ncu $op b$batch rc=$?"
      grep -E "Duration|Throughput|Issued Ins|Executed Ins|Warp Cycles|stall|Stall" "$log" | head -40; sed -n "/Warp Stall Sampling/,+40p" "$log" | head -60
    done
  done
fi
stop_kilnd
