#!/usr/bin/env bash
# Fails when the committed generated files (deepcopy, CRDs, RBAC role, the chart's
# copies) differ from what controller-gen and hack/sync-chart.sh produce from the
# current sources: run `make generate manifests`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

go tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/... output:object:dir="${tmp}/object"
go tool controller-gen crd paths=./api/... output:crd:artifacts:config="${tmp}/crd"
go tool controller-gen rbac:roleName=manager-role paths=./... output:rbac:dir="${tmp}/rbac"

stale=0
check() {
  if ! diff -u "$1" "$2" >"${tmp}/diff"; then
    echo "stale generated file: $1" >&2
    head -40 "${tmp}/diff" >&2
    stale=1
  fi
}
check api/v1alpha1/zz_generated.deepcopy.go "${tmp}/object/zz_generated.deepcopy.go"
for f in "${tmp}"/crd/*.yaml; do check "config/crd/bases/$(basename "$f")" "$f"; done
for f in config/crd/bases/*.yaml; do [[ -e "${tmp}/crd/$(basename "$f")" ]] || { echo "generated file without a source: $f" >&2; stale=1; }; done
check config/rbac/role.yaml "${tmp}/rbac/role.yaml"
# The chart's copies of the CRDs, the admission policy, the alerts and the dashboard.
chart=charts/tenantroute-operator
hack/sync-chart.sh "${tmp}/chart"
for f in "${tmp}"/chart/crds/* "${tmp}"/chart/files/*; do check "${chart}/${f#"${tmp}/chart/"}" "$f"; done
for f in "${chart}"/crds/*; do [[ -e "${tmp}/chart/crds/$(basename "$f")" ]] || { echo "chart CRD without a source: $f" >&2; stale=1; }; done
if (( stale )); then
  echo "generated files are stale: run 'make generate manifests' and commit the result" >&2
  exit 1
fi
