#!/usr/bin/env bash
# Builds kube-apiserver and etcd from Go modules (hack/tools) into bin/k8s/<version>/,
# the directory envtest's KUBEBUILDER_ASSETS points at. Nothing is downloaded but Go
# modules; a second run reuses the binaries, and a rebuild reuses the Go build cache.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools"
k8s_version="$(cd "${tools}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
out="${root}/bin/k8s/${k8s_version}"

if [[ -x "${out}/kube-apiserver" && -x "${out}/etcd" ]]; then
  echo "${out}"
  exit 0
fi
mkdir -p "${out}"

# Without a stamped version the server reports v0.0.0-master+$Format:%H$, which
# kubectl version cannot parse.
ver="${k8s_version#v}"
major="${ver%%.*}"
minor="$(echo "${ver}" | cut -d. -f2)"
pkg="k8s.io/component-base/version"
ldflags="-s -w -X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"

# progress runs a long command and says every 30 s what it is still doing and for how
# long, so that a first build never looks like a hung terminal.
progress() {
  local what="$1" start="${SECONDS}"
  shift
  echo "building ${what}" >&2
  ( while sleep 30; do echo "  still building ${what}: $(( SECONDS - start ))s" >&2; done ) &
  local ticker=$!
  local rc=0
  "$@" || rc=$?
  kill "${ticker}" 2>/dev/null || true
  wait "${ticker}" 2>/dev/null || true
  (( rc == 0 )) && echo "built ${what} in $(( SECONDS - start ))s" >&2
  return "${rc}"
}

cd "${tools}"
echo "kube-apiserver and etcd for the integration tests are built once into bin/k8s (~6 minutes on 2 cores)" >&2
progress "kube-apiserver ${k8s_version}" env CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${out}/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
progress "etcd" env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${out}/etcd.tmp" go.etcd.io/etcd/server/v3
# Rename only once both are complete so an interrupted build is never mistaken for a finished one.
mv "${out}/kube-apiserver.tmp" "${out}/kube-apiserver"
mv "${out}/etcd.tmp" "${out}/etcd"
echo "${out}"
