#!/usr/bin/env bash
# What one TenantRoute status patch costs the API server and etcd in CPU on this
# machine, with nothing else running, and the floor that sets under reporting on
# 10,000 and 100,000 routes (one status write per route per change).
#   ROUTES=3000 hack/bench-apiwrites.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
make -s envtest-assets
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(ls -d "${root}"/bin/k8s/*/ | tail -1)}"
go run ./hack/bench/apiwrites -routes "${ROUTES:-3000}"
