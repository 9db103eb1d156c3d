#!/usr/bin/env bash
# A/B of two kernel trees on the GPU machine, from the repository root with the bundle in .gpu/
# (bench/gpu_bundle.sh): the same client and kilnd binaries, one kilnd per tree (--kernels-dir),
# kiln-bench on LIST against A, then B, ROUNDS times over (A B A B ...: drift of the clock or the
# temperature falls on both sides alike), refcheck on. Every run's JSON goes to $OUT
# (ab-a-1.json, ab-b-1.json, ...), then bench/kernels_ab_summary.py prints, per case, the median
# of the runs' medians for A and B and B / A.
#
# A tree is a folder that holds kernels/ (the device headers, sources and generators' inputs);
# make one from a commit here and carry it (or make it on the machine from the working tree):
#   mkdir -p /tmp/ab-main && git archive main kernels | tar -x -C /tmp/ab-main
#   bash bench/kernels_ab.sh /tmp/ab-main . bench/gemm/fp8.list 2
# The trees must suit the client of the bundle (the same specs and params): an A/B of kernel
# code, not of the host side. A device command runs at most 10 minutes: each kiln-bench run is
# cut at AB_RUN_SECONDS (default 280; the first run of a side compiles its kernels), so choose
# the list and ROUNDS to fit, or split them over commands while the machine stays warm.
#   bash bench/kernels_ab.sh A_TREE B_TREE LIST [ROUNDS]
set -u
if [[ $# -lt 3 ]]; then
  echo "usage: bash bench/kernels_ab.sh A_TREE B_TREE LIST [ROUNDS]" >&2
  exit 2
fi
a_tree=$(cd "$1" && pwd) b_tree=$(cd "$2" && pwd) list=$3 rounds=${4:-2}
for tree in "$a_tree" "$b_tree"; do
  [[ -d $tree/kernels/include ]] || { echo "kernels_ab: $tree holds no kernels/include" >&2; exit 2; }
done
[[ -f $list ]] || { echo "kernels_ab: no list $list" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "kernels_ab: ROUNDS must be a positive integer, found $rounds" >&2; exit 2; }
run_seconds=${AB_RUN_SECONDS:-280}
[[ $run_seconds =~ ^[1-9][0-9]*$ ]] || { echo "kernels_ab: AB_RUN_SECONDS must be a positive integer, found $run_seconds" >&2; exit 2; }
source bench/gpu_kilnd.sh  # $OUT, the bundle's environment, start_kilnd
chmod -R a+rX "$a_tree/kernels" "$b_tree/kernels"

# One kilnd per tree, up for the whole A/B, both on the machine's shared compile cache
# (start_kilnd; the key names the sources, so each tree gets its own kernels and a kernel the
# trees share compiles once). The first run of each compiles what the cache lacks; kiln-bench's
# warm-up and its median keep the compile out of the figures.
declare -A socket pid
trap 'for p in "${pid[@]}"; do kill "$p" 2> /dev/null; done' EXIT
for side in a b; do
  tree=$a_tree
  [[ $side == b ]] && tree=$b_tree
  start_kilnd "$(mktemp -d "/tmp/kiln-ab-$side-XXXXXX")" "$OUT/ab-kilnd-$side.log" "$tree/kernels"
  pid[$side]=$kilnd_pid
  socket[$side]=$KILN_SOCKET
  [[ -S ${socket[$side]} ]] || { echo "kernels_ab: kilnd for $tree did not start:"; cat "$OUT/ab-kilnd-$side.log"; exit 1; }
done

runs=()
for round in $(seq "$rounds"); do
  for side in a b; do
    json=$OUT/ab-$side-$round.json
    rm -f "$json"  # a file from an earlier A/B in the same $OUT is not this run's
    KILN_SOCKET=${socket[$side]} timeout "$run_seconds" kiln-bench --list "$list" --out "$json" > "$OUT/ab-$side-$round.log" 2>&1
    echo "kiln-bench ($side, round $round) rc=$?"
    grep -E "FAIL|fail|error" "$OUT/ab-$side-$round.log" | head -5
    # A run cut short writes no JSON: its cases count as missing on that side.
    if [[ -f $json ]]; then runs+=("$side=$json"); else echo "kernels_ab: no $json (see $OUT/ab-$side-$round.log)"; fi
  done
done
if [[ ${#runs[@]} -eq 0 ]]; then
  echo "kernels_ab: no run wrote its JSON" >&2
  exit 1
fi
python3 bench/kernels_ab_summary.py "${runs[@]}"
