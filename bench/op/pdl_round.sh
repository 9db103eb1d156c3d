#!/usr/bin/env bash
# Programmatic dependent launch of the first wave's ops on and off (KILN_PDL=1 / 0), on the H200
# (device tool), from the repository root with the bundle in .gpu/: a kilnd of its own, then
# kiln-bench on the default cases of the ops whose kernels wait first (norms, activations, RoPE,
# the KV append, decode, the samplers; the kiln backend only: the refcheck still runs), ROUNDS
# times (default 1) alternating on / off, and a table of both (median µs, mean over the rounds).
# kiln-bench's CUPTI span of a call starts where the previous call ended, so the overlap a
# dependent launch buys (its launch and its blocks' start during the previous kernel) shows.
# Compare `stream` (kiln-bench's stream_us: the batch's span per call, launch gaps included):
# per-call medians leave a plain launch's gap out but keep a dependent's wait in.
# PDL_CASES: a regex on the cases' labels (default: every case).
#   bash bench/op/pdl_round.sh [ROUNDS]   # logs and JSON in $OUT
set -u
rounds=${1:-1}
source bench/gpu_kilnd.sh

dir=$(mktemp -d)
start_kilnd "$dir" "$OUT/kilnd-pdl.log"

ops='rmsnorm|fused_add_rmsnorm|silu_and_mul|gelu_and_mul|gelu_tanh_and_mul|apply_rope|apply_rope_with_cos_sin_cache'
ops+='|append_paged_kv|batch_decode|top_k_sampling|top_p_sampling|top_k_top_p_sampling|min_p_sampling|argmax'
kiln-bench --generate-list kernels/traces | grep -E "^($ops) " | awk '{$4 = "kiln"; print}' |
  grep -E " (${PDL_CASES:-.*})\$" > "$dir/pdl.list"
for round in $(seq "$rounds"); do
  for pdl in 1 0; do
    KILN_PDL=$pdl timeout 250 kiln-bench --list "$dir/pdl.list" --out "$OUT/pdl-$pdl-$round.json" \
      > "$OUT/pdl-$pdl-$round.log" 2>&1
    echo "kiln-bench KILN_PDL=$pdl round $round: rc=$?"
  done
done
stop_kilnd

"$py" - "$OUT" <<'PY' || true
import glob, json, statistics, sys
out = sys.argv[1]
rows = {}
for pdl in ("1", "0"):
    for name in sorted(glob.glob(f"{out}/pdl-{pdl}-*.json")):
        for row in json.load(open(name))["rows"]:
            if row.get("backend") == "kiln" and row.get("status") == "ok":
                key = (row["routine"], row.get("label") or row.get("shape"))
                rows.setdefault(key, {}).setdefault(pdl, []).append((row["median_us"], row.get("stream_us")))
nan = float("nan")
def mean(v, i):
    got = [x[i] for x in v if x[i] is not None]
    return statistics.mean(got) if got else nan
print(f"{'routine':30} {'case':36} {'median on':>9} {'off':>8} {'on/off':>7} {'stream on':>9} {'off':>8} {'on/off':>7}")
for (routine, case), v in rows.items():
    on, off = v.get("1", [(nan, None)]), v.get("0", [(nan, None)])
    m1, m0, s1, s0 = mean(on, 0), mean(off, 0), mean(on, 1), mean(off, 1)
    print(f"{routine:30} {case:36} {m1:9.2f} {m0:8.2f} {m1 / m0:7.3f} {s1:9.2f} {s0:8.2f} {s1 / s0:7.3f}")
PY
