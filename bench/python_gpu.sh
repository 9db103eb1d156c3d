#!/usr/bin/env bash
# The Python package on the GPU machine (device tool, H200): its GPU tests, and the site that
# bench/compare_torch.py imports it from. That machine has Python 3.12 with torch
# (/opt/torch/.venv) but neither the Python this checkout's package is built for nor pytest,
# gRPC or the DLPack header; so the extension kiln._native is compiled there, against the
# bundle's libkiln_client, into a folder outside the tree (/tmp/kiln-py).
#
#   bash bench/python_gpu.sh prepare [BUILD_DIR]   # here, after bench/gpu_bundle.sh (which must
#                                                  # include BUILD_DIR/client/libkiln_client.so.*):
#                                                  # copies the headers and pytest's wheels into
#                                                  # .gpu/python/
#   bash bench/python_gpu.sh site                  # there, from the repository root, after
#                                                  # `source .gpu/env.sh`: builds /tmp/kiln-py/kiln
#                                                  # (the package with its extension) and prints
#                                                  # the PYTHONPATH to use (alone on stdout; the
#                                                  # build's messages go to stderr)
#   bash bench/python_gpu.sh run [PYTEST_ARGS...]  # there, from the repository root: builds the
#                                                  # site as `site` does, runs pytest tests/python
#
# Run the package's users with the machine's Python (KILN_GPU_PYTHON, default
# /opt/torch/.venv/bin/python) and the environment of .gpu/env.sh (libkiln_client's libraries):
#   source .gpu/env.sh && PYTHONPATH=$(bash bench/python_gpu.sh site) \
#     /opt/torch/.venv/bin/python bench/compare_torch.py --out $OUT/compare-torch.json
#
# FlashInfer, when unpacked outside the tree (docs/benchmarking.md: /tmp/fisite),
# is found through PYTHONPATH=/tmp/fisite (kept after the site by `site` and `run`); the
# FlashInfer comparisons skip visibly otherwise.
set -euo pipefail
what=${1:-run}
shift || true

if [[ $what == prepare ]]; then
  build=${1:-build}
  dest=.gpu/python
  rm -rf "$dest" && mkdir -p "$dest/include/kiln/ops" "$dest/include/dlpack" "$dest/wheels"
  cp "$build"/client/include/kiln/version.h "$dest/include/kiln/"
  cp "$build"/client/include/kiln/ops/all.h "$dest/include/kiln/ops/"
  cp /usr/include/dlpack/dlpack.h "$dest/include/dlpack/"
  python3 -m pip download --no-deps -q pytest pluggy iniconfig packaging -d "$dest/wheels"
  echo "python_gpu.sh: $dest ready ($(du -sh "$dest" | cut -f1))"
  exit 0
fi

[[ $what == run || $what == site ]] || {
  echo "usage: bash bench/python_gpu.sh prepare [BUILD_DIR] | site | run [PYTEST_ARGS...]" >&2; exit 2; }
source .gpu/env.sh
py=${KILN_GPU_PYTHON:-/opt/torch/.venv/bin/python}
site=/tmp/kiln-py

# /tmp/kiln-py: pytest's wheels, client/python/kiln, libkiln_client beside the extension.
build_site() {
  [[ -d .gpu/python/include && -d .gpu/python/wheels ]] || {
    echo "python_gpu.sh: no .gpu/python: run 'bash bench/python_gpu.sh prepare BUILD_DIR' where the bundle is" \
      "made (after bench/gpu_bundle.sh) and carry .gpu with it" >&2; return 2; }
  rm -rf "$site" && mkdir -p "$site"
  "$py" -m pip install -q --no-deps --no-index --target "$site" .gpu/python/wheels/*.whl
  cp -r client/python/kiln "$site/kiln"
  cat > "$site/kiln/_build_info.py" <<INFO
"""Written by bench/python_gpu.sh on the GPU machine."""
CHECKOUT = "$PWD"
BUILD_DIR = ""
CLIENT_FROM = "the GPU bundle ($PWD/.gpu/lib)"
BUNDLED_CLIENT = False
INFO
  # The bundle holds the client library in lib/ (a dependency of a bundled binary) or bin/ (named
  # explicitly): either way it goes beside the extension under its soname, found through $ORIGIN.
  local lib soname suffix include
  lib=$(ls .gpu/lib/libkiln_client.so.* .gpu/bin/libkiln_client.so.* 2>/dev/null | head -1 || true)
  [[ -n $lib ]] || {
    echo "python_gpu.sh: no libkiln_client in .gpu (bundle build/client/libkiln_client.so.*)" >&2; return 2; }
  soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
  cp "$lib" "$site/kiln/$soname"
  suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  g++ -O2 -std=c++20 -shared -fPIC -fvisibility=hidden -I"$include" -Iclient/include -I.gpu/python/include \
    client/python/src/kiln_native.cpp "$site/kiln/$soname" -Wl,-rpath,'$ORIGIN' -o "$site/kiln/_native$suffix"
  echo "python_gpu.sh: kiln._native built for $("$py" --version) against $lib"
}

if [[ $what == site ]]; then
  build_site >&2
  echo "python_gpu.sh: run with PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} $py (after source .gpu/env.sh)" >&2
  echo "$site${PYTHONPATH:+:$PYTHONPATH}"
  exit 0
fi

build_site
export PYTHONPATH="$site:${PYTHONPATH:-}"
export KILN_TEST_KILND=$PWD/.gpu/bin/kilnd KILN_TEST_KERNELS_DIR=$PWD/kernels
cd tests/python && "$py" -m pytest -q -p no:cacheprovider "$@"
