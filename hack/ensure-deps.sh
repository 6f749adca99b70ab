#!/usr/bin/env bash
# Installs the system packages a make target needs when they are missing, so that
# `make test` and `make demo` work on a fresh machine with nothing typed before them.
#   hack/ensure-deps.sh test    redis-server (the proxy and operator tests run a real Redis)
#   hack/ensure-deps.sh bench   redis-server, nginx, haproxy, caddy, wrk and h2load (the side-by-side
#                               benchmark scripts)
# Packages come from apt-get, as root or with passwordless sudo; otherwise the script
# stops with one line naming the command to run.
set -euo pipefail

want=(make git curl redis-server)
[[ "${1:-test}" == bench ]] && want+=(nginx haproxy caddy wrk nghttp2-client)

# The command each package provides.
declare -A provides=([make]=make [git]=git [curl]=curl [redis-server]=redis-server [nginx]=nginx [haproxy]=haproxy [caddy]=caddy [wrk]=wrk [nghttp2-client]=h2load)

missing=()
for pkg in "${want[@]}"; do
  cmd="${provides[${pkg}]}"
  command -v "${cmd}" >/dev/null 2>&1 || [[ -x "/usr/sbin/${cmd}" ]] || missing+=("${pkg}")
done
if ! command -v go >/dev/null 2>&1; then
  echo "Go is not installed: install it from https://go.dev/dl/ (the version in go.mod) and run this again" >&2
  exit 1
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl is not on the PATH: install it (https://kubernetes.io/docs/tasks/tools/) and run this again" >&2
  exit 1
fi
(( ${#missing[@]} == 0 )) && exit 0

if (( EUID == 0 )); then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "missing ${missing[*]}: run  sudo apt-get install -y ${missing[*]}  and try again" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing ${missing[*]} and no apt-get here: install them with your package manager and try again" >&2
  exit 1
fi
echo "installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts the packaged services; the tests and benchmarks run their own.
for svc in redis-server nginx haproxy caddy; do
  if [[ " ${missing[*]} " == *" ${svc} "* ]] && command -v service >/dev/null 2>&1; then
    "${sudo[@]}" service "${svc}" stop >/dev/null 2>&1 || true
  fi
done
