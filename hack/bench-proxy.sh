#!/usr/bin/env bash
# Measures the proxy against nginx side by side: same Go backend (512-byte answers),
# same load generator (wrk -t1 -c50), and prints throughput, p99 and the ratios.
# Needs nginx and wrk (apt-get install nginx wrk).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
duration="${DURATION:-15s}"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "${work}"; }
trap cleanup EXIT

"$(dirname "${BASH_SOURCE[0]}")/ensure-deps.sh" bench
(cd "${root}" && go build -o "${work}/backend" ./hack/bench/backend && go build -o "${work}/proxy" ./hack/bench/proxy)

"${work}/backend" -listen 127.0.0.1:19001 & pids+=($!)
"${work}/proxy" -listen 127.0.0.1:19002 -backend http://127.0.0.1:19001 & pids+=($!)
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

measure() { # name url
  wrk -t1 -c50 -d2s -H 'Host: bench.example.com' "$2" >/dev/null # warm up
  wrk -t1 -c50 -d"${duration}" --latency -H 'Host: bench.example.com' "$2" > "${work}/$1.txt"
  local rps p99
  rps=$(awk '/Requests\/sec/ {print $2}' "${work}/$1.txt")
  p99=$(awk '$1 == "99%" {print $2}' "${work}/$1.txt")
  echo "$1 ${rps} ${p99}"
}
to_ms() { awk -v v="$1" 'BEGIN { if (v ~ /us$/) { sub(/us/,"",v); print v/1000 } else if (v ~ /ms$/) { sub(/ms/,"",v); print v } else { sub(/s/,"",v); print v*1000 } }'; }

# Alternate the two, several rounds, and compare medians: this machine's throughput
# drifts by 10-20% from one run to the next.
rounds="${ROUNDS:-3}"
: > "${work}/results"
for _ in $(seq "${rounds}"); do
  measure nginx http://127.0.0.1:19003/ >> "${work}/results"
  measure proxy http://127.0.0.1:19002/ >> "${work}/results"
done
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
nginx_rps=$(awk '$1 == "nginx" { print $2 }' "${work}/results" | median)
proxy_rps=$(awk '$1 == "proxy" { print $2 }' "${work}/results" | median)
nginx_ms=$(awk '$1 == "nginx" { print $3 }' "${work}/results" | while read -r v; do to_ms "$v"; done | median)
proxy_ms=$(awk '$1 == "proxy" { print $3 }' "${work}/results" | while read -r v; do to_ms "$v"; done | median)
echo "each run (name, requests/s, p99):"
sed 's/^/  /' "${work}/results"
printf 'median of %s rounds: %-18s %12s %10s\n' "${rounds}" "" "requests/s" "p99"
printf '%-18s %12s %9sms\n' "nginx" "${nginx_rps}" "${nginx_ms}"
printf '%-18s %12s %9sms\n' "tenantroute proxy" "${proxy_rps}" "${proxy_ms}"
awk -v a="${proxy_rps}" -v b="${nginx_rps}" -v c="${proxy_ms}" -v d="${nginx_ms}" \
  'BEGIN { printf "throughput ratio proxy/nginx: %.2fx   p99 ratio proxy/nginx: %.2fx\n", a/b, c/d }'
