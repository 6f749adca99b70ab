#!/usr/bin/env bash
# Measures the proxy against nginx side by side: same Go backend (512-byte answers),
# same load generator (wrk -t1 -c50), and prints throughput, p99, CPU per request and
# the ratios.
# FLOOR=1 measures hack/bench/floor too: the cheapest epoll forwarder in Go, which does
# none of the proxy's work, as the ceiling of an event loop of the proxy's own.
# Needs nginx and wrk (apt-get install nginx wrk).
set -euo pipefail
# shellcheck source=bench/measure.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench/measure.sh"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
duration="${DURATION:-15s}"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "${work}"; }
trap cleanup EXIT

"$(dirname "${BASH_SOURCE[0]}")/ensure-deps.sh" bench
(cd "${root}" && go build -o "${work}/backend" ./hack/bench/backend && go build -o "${work}/proxy" ./hack/bench/proxy)
[[ "${FLOOR:-0}" == 1 ]] && (cd "${root}" && go build -o "${work}/floor" ./hack/bench/floor)

"${work}/backend" -listen 127.0.0.1:19001 & pids+=($!)
"${work}/proxy" -listen 127.0.0.1:19002 -backend http://127.0.0.1:19001 & pids+=($!)
proxy_pid=$!
if [[ "${FLOOR:-0}" == 1 ]]; then
  "${work}/floor" -listen 127.0.0.1:19004 -backend 127.0.0.1:19001 & pids+=($!)
  floor_pid=$!
fi
cat > "${work}/nginx.conf" <<NGINX
worker_processes auto;
pid ${work}/nginx.pid;
error_log ${work}/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  upstream backend { server 127.0.0.1:19001; keepalive 128; }
  server {
    listen 127.0.0.1:19003;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
NGINX
nginx -c "${work}/nginx.conf" -g 'daemon off;' & pids+=($!)
sleep 1
mapfile -t nginx_workers < <(pgrep -P "${pids[-1]}")


measure() { # name url pids...
  local name=$1 url=$2; shift 2
  wrk -t1 -c50 -d2s -H 'Host: bench.example.com' "${url}" >/dev/null # warm up
  local before; before=$(ticks "$@")
  wrk -t1 -c50 -d"${duration}" --latency -H 'Host: bench.example.com' "${url}" > "${work}/${name}.txt"
  local rps p99 requests cpu
  cpu=$(( $(ticks "$@") - before ))
  rps=$(awk '/Requests\/sec/ {print $2}' "${work}/${name}.txt")
  p99=$(awk '$1 == "99%" {print $2}' "${work}/${name}.txt")
  requests=$(awk '/requests in/ {print $1}' "${work}/${name}.txt")
  # CPU per request: a steadier measure than throughput on a machine whose speed drifts.
  echo "${name} ${rps} ${p99} $(awk -v c="${cpu}" -v hz="${hz}" -v r="${requests}" 'BEGIN { printf "%.1f", c / hz * 1e6 / r }')"
}

# Alternate the two, several rounds, and compare medians: this machine's throughput
# drifts by 10-20% from one run to the next.
rounds="${ROUNDS:-3}"
: > "${work}/results"
for _ in $(seq "${rounds}"); do
  measure nginx http://127.0.0.1:19003/ "${nginx_workers[@]}" >> "${work}/results"
  measure proxy http://127.0.0.1:19002/ "${proxy_pid}" >> "${work}/results"
  if [[ "${FLOOR:-0}" == 1 ]]; then measure floor http://127.0.0.1:19004/ "${floor_pid}" >> "${work}/results"; fi
done
nginx_rps=$(awk '$1 == "nginx" { print $2 }' "${work}/results" | median)
proxy_rps=$(awk '$1 == "proxy" { print $2 }' "${work}/results" | median)
nginx_ms=$(awk '$1 == "nginx" { print $3 }' "${work}/results" | while read -r v; do to_ms "$v"; done | median)
proxy_ms=$(awk '$1 == "proxy" { print $3 }' "${work}/results" | while read -r v; do to_ms "$v"; done | median)
nginx_cpu=$(awk '$1 == "nginx" { print $4 }' "${work}/results" | median)
proxy_cpu=$(awk '$1 == "proxy" { print $4 }' "${work}/results" | median)
echo "each run (name, requests/s, p99, CPU us per request):"
sed 's/^/  /' "${work}/results"
printf 'median of %s rounds: %12s %10s %16s\n' "${rounds}" "requests/s" "p99" "CPU us/request"
printf '%-20s %12s %8sms %16s\n' "nginx" "${nginx_rps}" "${nginx_ms}" "${nginx_cpu}"
printf '%-20s %12s %8sms %16s\n' "tenantroute proxy" "${proxy_rps}" "${proxy_ms}" "${proxy_cpu}"
awk -v a="${proxy_rps}" -v b="${nginx_rps}" -v c="${proxy_ms}" -v d="${nginx_ms}" -v e="${proxy_cpu}" -v f="${nginx_cpu}" \
  'BEGIN { printf "throughput ratio proxy/nginx: %.2fx   p99 ratio proxy/nginx: %.2fx   CPU per request proxy/nginx: %.2fx\n", a/b, c/d, e/f }'
if [[ "${FLOOR:-0}" == 1 ]]; then
  floor_rps=$(awk '$1 == "floor" { print $2 }' "${work}/results" | median)
  floor_ms=$(awk '$1 == "floor" { print $3 }' "${work}/results" | while read -r v; do to_ms "$v"; done | median)
  floor_cpu=$(awk '$1 == "floor" { print $4 }' "${work}/results" | median)
  printf '%-20s %12s %8sms %16s\n' "epoll floor" "${floor_rps}" "${floor_ms}" "${floor_cpu}"
  awk -v a="${floor_rps}" -v b="${nginx_rps}" -v c="${floor_ms}" -v d="${nginx_ms}" -v e="${floor_cpu}" -v f="${nginx_cpu}" \
    'BEGIN { printf "floor/nginx: throughput %.2fx   p99 %.2fx   CPU per request %.2fx\n", a/b, c/d, e/f }'
fi
