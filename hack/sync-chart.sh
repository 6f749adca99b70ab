#!/usr/bin/env bash
# Copies into the Helm chart what it shares with config/: the CRDs, the admission
# policy, the alert rules and the Grafana dashboard (Helm cannot read files outside
# the chart). `make manifests` runs it; hack/verify-generated.sh fails on a stale copy.
#   hack/sync-chart.sh [DIR]    (DIR: where to write the chart's copies; the chart's own by default)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="${1:-${root}/charts/tenantroute-operator}"
mkdir -p "${chart}/crds" "${chart}/files"
rm -f "${chart}"/crds/*.yaml
cp "${root}"/config/crd/bases/*.yaml "${chart}/crds/"
cp "${root}/config/policy/zone_namespaces.yaml" "${chart}/files/zone_namespaces.yaml"
cp "${root}/config/policy/tenant_namespaces.yaml" "${chart}/files/tenant_namespaces.yaml"
cp "${root}/config/policy/route_finalizer.yaml" "${chart}/files/route_finalizer.yaml"
cp "${root}/config/prometheus/alerts.yaml" "${chart}/files/alerts.yaml"
cp "${root}/config/grafana/tenantroute.json" "${chart}/files/dashboard.json"
