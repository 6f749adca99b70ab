#!/usr/bin/env bash
# The manager killed with SIGKILL at random moments while it creates and while it
# deletes TenantRoutes, then a clean run: counts what each provider holds.
#   RUNS=3 ROUTES=3000 KILLS=6 hack/bench-faults.sh
# The clean run keeps the orphan sweep off (SWEEP=true turns it on), so that a record a
# deletion left behind shows as an orphan rather than being swept.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
RUNS="${RUNS:-3}" ROUTES="${ROUTES:-3000}" KILLS="${KILLS:-6}" SWEEP="${SWEEP:-false}"
make -s envtest-assets
echo "building the manager"
go build -o bin/manager ./cmd
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(ls -d "${root}"/bin/k8s/*/ | tail -1)}"
failed=0
for run in $(seq 1 "${RUNS}"); do
  echo "run ${run}/${RUNS}: ${ROUTES} routes, ${KILLS} kills while creating and ${KILLS} while deleting"
  go run ./hack/faults -manager bin/manager -routes "${ROUTES}" -kills "${KILLS}" -sweep="${SWEEP}" || failed=$((failed + 1))
done
echo "${failed} of ${RUNS} runs not clean"
exit $(( failed > 0 ))
