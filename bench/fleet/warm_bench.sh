#!/usr/bin/env bash
# How long a new node takes to be warm for a spec list (default: the Llama-3.1-8B op set,
# bench/fleet/llama31_8b.list), per tier, with real daemons on this machine (CPU figures: NVRTC
# needs no GPU). Each row starts a fresh daemon with an empty cache and times `kiln warm LIST`
# (every spec served, the daemon's compile count read from GetStats):
#   cold      nothing to reuse: every spec compiles
#   bundle    kilnd --prebuilt BUNDLE (kiln aot build from the cold node): nothing compiles
#   repository kilnd --artifact-url: the same bundle served by python3 -m http.server on loopback
#   cold-publish  as cold, with kilnd --remote-cache (an empty redis-server on loopback): every spec
#             compiles and is published in the background
#   remote    kilnd --remote-cache --disable-jit against that Redis: nothing compiles
#             (both Redis rows only where redis-server is installed)
#   disk      a restart of the bundle node: everything is in its cache already
# Prints one Markdown row per run and writes them as JSON lines to OUT (default
# /tmp/kiln-warm-bench.jsonl).
#   bash bench/fleet/warm_bench.sh [BUILD_DIR] [LIST] [RUNS]
set -euo pipefail
build=${1:-build}
list=${2:-bench/fleet/llama31_8b.list}
runs=${3:-3}
out=${OUT:-/tmp/kiln-warm-bench.jsonl}
kilnd=$build/server/kilnd
kiln=$build/client/kiln
work=$(mktemp -d)
redis_pid=""
trap 'pkill -f "$work/" 2>/dev/null; pkill -f "http.server --directory $work" 2>/dev/null; [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null; rm -rf "$work"' EXIT
redis_port=""
if command -v redis-server > /dev/null && command -v redis-cli > /dev/null; then
  redis_port=$((20000 + RANDOM % 20000))
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" > "$work/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 50); do redis-cli -p "$redis_port" ping > /dev/null 2>&1 && break; sleep 0.1; done
fi
: > "$out"

start_daemon() {  # NAME [FLAGS...]: a daemon on $work/NAME.sock with cache $work/NAME
  local name=$1; shift
  "$kilnd" --socket "$work/$name.sock" --cache-dir "$work/$name" --kernels-dir "$PWD/kernels" "$@" \
    > "$work/$name.log" 2>&1 &
  for _ in $(seq 100); do [[ -S $work/$name.sock ]] && return; sleep 0.1; done
  echo "kilnd $name did not start:"; cat "$work/$name.log"; exit 1
}
stop_daemon() { pkill -f "$work/$1.sock" || true; sleep 0.3; }
compiles() { "$kiln" --socket "$work/$1.sock" cache stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("compiles", "0"))'; }

warm() {  # TIER NAME: times kiln warm against daemon NAME, prints a row
  local tier=$1 name=$2 t0 t1
  t0=$(date +%s.%N)
  "$kiln" --socket "$work/$name.sock" warm "$list" --jobs 4 > "$work/$name-warm.jsonl"
  t1=$(date +%s.%N)
  local seconds specs origins n
  seconds=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
  specs=$(wc -l < "$work/$name-warm.jsonl")
  origins=$(python3 -c 'import json,sys,collections; c=collections.Counter(json.loads(l)["origin"] for l in open(sys.argv[1])); print(", ".join(f"{n} {o}" for o,n in sorted(c.items())))' "$work/$name-warm.jsonl")
  n=$(compiles "$name")
  echo "| $tier | $specs | $seconds s | $origins | $n |"
  echo "{\"tier\":\"$tier\",\"specs\":$specs,\"seconds\":$seconds,\"compiles\":$n,\"origins\":\"$origins\"}" >> "$out"
}

echo "list $list, $(nproc) CPUs, $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ)"
echo "| tier | specs | time to warm | served from | compiles on the node |"
echo "| --- | --- | --- | --- | --- |"
for run in $(seq "$runs"); do
  rm -rf "$work/cold" "$work/bundle" "$work/node"*
  start_daemon cold --max-jobs "$(nproc)"
  warm cold cold
  "$kiln" --socket "$work/cold.sock" aot build --arch sm_90a --ops "$list" --out "$work/bundle" > /dev/null
  stop_daemon cold
  start_daemon node --prebuilt "$work/bundle" --disable-jit
  warm bundle node
  stop_daemon node
  rm -rf "$work/node" "$work/repo" && mkdir -p "$work/repo" && cp -r "$work/bundle" "$work/repo/fleet"
  "$kiln" aot index "$work/repo" > /dev/null
  port=$((20000 + RANDOM % 20000))
  python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work/repo" > "$work/http.log" 2>&1 &
  web=$!
  for _ in $(seq 50); do python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1])" "http://127.0.0.1:$port/index.json" 2>/dev/null && break; sleep 0.1; done
  start_daemon node --artifact-url "http://127.0.0.1:$port" --disable-jit
  warm repository node
  stop_daemon node
  kill $web
  if [[ -n $redis_port ]]; then
    redis-cli -p "$redis_port" flushall > /dev/null
    rm -rf "$work/seed" "$work/node"
    start_daemon seed --remote-cache "redis://127.0.0.1:$redis_port" --max-jobs "$(nproc)"
    warm cold-publish seed
    stop_daemon seed  # a stop publishes what is still queued
    start_daemon node --remote-cache "redis://127.0.0.1:$redis_port" --disable-jit
    warm remote node
    stop_daemon node
  fi
  rm -rf "$work/node"
  start_daemon node --prebuilt "$work/bundle" --disable-jit
  "$kiln" --socket "$work/node.sock" warm "$list" > /dev/null 2>&1
  stop_daemon node
  start_daemon node --disable-jit
  warm disk node
  stop_daemon node
done
