#!/usr/bin/env bash
# Fault scenarios against a real API server, the manager binary and both emulators.
#   RUNS=3 ROUTES=3000 KILLS=6 hack/bench-faults.sh [sigkill]
#     The manager killed with SIGKILL at random moments while it creates and while it
#     deletes TenantRoutes, then a clean run: counts what each provider holds. The
#     clean run keeps the orphan sweep off (SWEEP=true turns it on), so that a record a
#     deletion left behind shows as an orphan rather than being swept.
#   RUNS=3 ROUTES=3000 MOVES=300 ROUNDS=3 hack/bench-faults.sh leader
#     Two replicas with leader election, each serving its embedded proxy; the leader
#     is killed in the first sync and in a failover, then in each round MOVES
#     hostnames change tenant and the leader is killed at a moment of the hand-over. A checker samples every 250 ms which tenant each moved hostname
#     leads to in both providers and both proxies. PLANT=1 builds the manager with the
#     planted fault (a contested grant used before it is saved), which it must report.
#   RUNS=3 ROUTES=3000 MOVES=300 ETCD_DOWN=30s hack/bench-faults.sh apiserver
#     The same pair and checker; the API server restarted twice during the first sync,
#     then etcd stopped for ETCD_DOWN and the API server restarted while names move.
#   RUNS=3 ROUTES=3000 MOVES=300 FAULT_FOR=10m hack/bench-faults.sh outage|throttle|lost
#     A hand-over without fault, then one during which Route53 answers 503 (outage),
#     Cloudflare 429 to 80% of calls (throttle, FAULT_FOR=5m in the issue) or both
#     providers drop the answer to a third of the writes they apply (lost), for
#     FAULT_FOR: recovery within 60 s of the end, with at most 10% more calls than the
#     hand-over without fault took.
#   RUNS=3 ROUTES=3000 MOVES=300 ROUNDS=3 hack/bench-faults.sh clock
#     The same pair, built with a wall clock the harness steps (bin/manager-clock,
#     internal/faults/wallclock): the leader's clock steps ten minutes ahead in the
#     failback hold-down, then as names move the leader's back and the other's ahead,
#     the leader killed and the replica ahead taking over and stepping back, the
#     leader's ahead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
SCENARIO="${1:-sigkill}"
RUNS="${RUNS:-3}" ROUTES="${ROUTES:-3000}" KILLS="${KILLS:-6}" SWEEP="${SWEEP:-false}"
MOVES="${MOVES:-300}" ROUNDS="${ROUNDS:-3}" ETCD_DOWN="${ETCD_DOWN:-30s}" FAULT_FOR="${FAULT_FOR:-10m}"
make -s envtest-assets
echo "building the manager"
go build ${PLANT:+-tags plantfault} -o bin/manager ./cmd
if [[ "${SCENARIO}" == clock ]]; then
  overlay="$(go run ./hack/faults -wall-clock-overlay bin/wallclock)"
  go build -overlay "${overlay}" -o bin/manager-clock ./cmd
fi
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(ls -d "${root}"/bin/k8s/*/ | tail -1)}"
failed=0
for run in $(seq 1 "${RUNS}"); do
  case "${SCENARIO}" in
    sigkill)
      echo "run ${run}/${RUNS}: ${ROUTES} routes, ${KILLS} kills while creating and ${KILLS} while deleting"
      go run ./hack/faults -manager bin/manager -routes "${ROUTES}" -kills "${KILLS}" -sweep="${SWEEP}" || failed=$((failed + 1)) ;;
    leader)
      echo "run ${run}/${RUNS}: ${ROUTES} routes, ${MOVES} hostnames moved in each of ${ROUNDS} rounds, the leader killed in each"
      go run ./hack/faults -scenario leader -manager bin/manager -routes "${ROUTES}" -moves "${MOVES}" -rounds "${ROUNDS}" || failed=$((failed + 1)) ;;
    apiserver)
      echo "run ${run}/${RUNS}: ${ROUTES} routes, the API server restarted twice in the sync, etcd stopped for ${ETCD_DOWN}"
      go run ./hack/faults -scenario apiserver -manager bin/manager -routes "${ROUTES}" -moves "${MOVES}" -rounds 2 -etcd-down "${ETCD_DOWN}" || failed=$((failed + 1)) ;;
    outage|throttle|lost)
      echo "run ${run}/${RUNS}: ${ROUTES} routes, ${MOVES} hostnames moved without fault, then during ${SCENARIO} for ${FAULT_FOR}"
      go run ./hack/faults -scenario "${SCENARIO}" -manager bin/manager -routes "${ROUTES}" -moves "${MOVES}" -rounds 2 -fault-for "${FAULT_FOR}" || failed=$((failed + 1)) ;;
    clock)
      echo "run ${run}/${RUNS}: ${ROUTES} routes, ${MOVES} hostnames moved in each of ${ROUNDS} rounds, wall clocks stepped 10 minutes"
      go run ./hack/faults -scenario clock -manager bin/manager-clock -routes "${ROUTES}" -moves "${MOVES}" -rounds "${ROUNDS}" || failed=$((failed + 1)) ;;
    *) echo "unknown scenario ${SCENARIO} (sigkill, leader, apiserver, outage, throttle, lost, clock)" >&2; exit 2 ;;
  esac
done
# The plantfault build must not stay in bin/.
if [[ -n "${PLANT:-}" ]]; then go build -o bin/manager ./cmd; fi
echo "${failed} of ${RUNS} runs not clean"
exit $(( failed > 0 ))
