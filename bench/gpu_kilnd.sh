# A kilnd of a GPU round's own, for the scripts that run on the device machine (sourced after
# `source .gpu/env.sh`, from the repository root):
#   start_kilnd DIR LOG   a daemon with its socket, cache and gen dir in DIR and this tree's
#                         kernels, its output in LOG; waits for the socket (up to 10 s) and
#                         exports KILN_SOCKET
#   stop_kilnd            ends it (nothing when none was started)
kilnd_pid=
start_kilnd() {
  kilnd --socket "$1/kilnd.sock" --cache-dir "$1/cache" --gen-dir "$1/gen" --kernels-dir "$PWD/kernels" > "$2" 2>&1 &
  kilnd_pid=$!
  for _ in $(seq 100); do [[ -S $1/kilnd.sock ]] && break; sleep 0.1; done
  export KILN_SOCKET=$1/kilnd.sock
}
stop_kilnd() {
  if [[ -n $kilnd_pid ]]; then
    kill "$kilnd_pid"
    wait "$kilnd_pid" 2>/dev/null
  fi
  kilnd_pid=
}
