#!/usr/bin/env bash
# The operator at scale, as one process with default flags: N TenantRoutes over 10
# zones, a real API server, both provider emulators with their real rate limits.
# From the manager's start: every record converged, every route Ready; then a failover
# of every route (records moved, statuses updated); API writes and provider calls of
# each phase and of a steady minute; the manager's peak RSS and CPU seconds.
# config/policy/route_finalizer.yaml is installed, as config/default installs it
# (SCALE_ARGS=-without-finalizer-policy leaves it out: the manager adds each finalizer).
#   ROUTES="10000 100000" hack/bench-scale.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
ROUTES="${ROUTES:-10000 100000}" ZONES="${ZONES:-10}" STEADY="${STEADY:-60s}"
make -s envtest-assets
echo "building the manager"
go build -o bin/manager ./cmd
go build -o bin/scale ./hack/scale
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(ls -d "${root}"/bin/k8s/*/ | tail -1)}"
for n in ${ROUTES}; do
  echo "== ${n} TenantRoutes over ${ZONES} zones"
  bin/scale -manager bin/manager -routes "${n}" -zones "${ZONES}" -steady "${STEADY}" ${SCALE_ARGS:-} ${MANAGER_ARGS:+-manager-args "${MANAGER_ARGS}"}
done
