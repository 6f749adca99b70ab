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

cd "${tools}"
echo "building kube-apiserver ${k8s_version} (first build takes ~6 minutes on 2 cores)" >&2
CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${out}/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
echo "building etcd" >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${out}/etcd.tmp" go.etcd.io/etcd/server/v3
# Rename only once both are complete so an interrupted build is never mistaken for a finished one.
mv "${out}/kube-apiserver.tmp" "${out}/kube-apiserver"
mv "${out}/etcd.tmp" "${out}/etcd"
echo "${out}"
