#!/usr/bin/env bash
# HTTPS side by side with nginx: the same ECDSA P-256 certificate, the same Go backend
# (512-byte answers), the same load generators. Prints, per round and as medians of
# alternating rounds:
#   keep-alive   wrk -t1 -c50 over TLS: requests/s, p99, CPU per request
#   handshakes   wrk -t1 -c50 with Connection: close: every request a new connection
#                and a full handshake (wrk resumes no session): handshakes/s
#   http2        h2load -c50 -m1: nginx's HTTP/2 against Go's net/http HTTP/2 front
#                on the same routing chain (the option measured for HTTP/2 to clients),
#                beside the proxy's HTTP/1.1 over TLS
# Needs nginx, wrk and h2load (hack/ensure-deps.sh bench installs them).
set -euo pipefail
# shellcheck source=bench/measure.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench/measure.sh"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
duration="${DURATION:-10s}"
rounds="${ROUNDS:-3}"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "${work}"; }
trap cleanup EXIT

"$(dirname "${BASH_SOURCE[0]}")/ensure-deps.sh" bench
(cd "${root}" && go build -o "${work}/backend" ./hack/bench/backend && go build -o "${work}/proxy" ./hack/bench/proxy)
mkdir -p "${work}/certs"
"${work}/proxy" -gen-cert "${work}/certs"

"${work}/backend" -listen 127.0.0.1:19001 & pids+=($!)
"${work}/proxy" -listen 127.0.0.1:19002 -backend http://127.0.0.1:19001 \
  -tls-listen 127.0.0.1:19012 -h2-listen 127.0.0.1:19022 -cert-dir "${work}/certs" & pids+=($!)
proxy_pid=$!
cat > "${work}/nginx.conf" <<NGINX
worker_processes auto;
pid ${work}/nginx.pid;
error_log ${work}/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  # No cap on requests per connection (nginx closes after 1,000 by default, HTTP/2
  # included, which h2load does not reconnect from); the proxy has none either.
  keepalive_requests 1000000;
  upstream backend { server 127.0.0.1:19001; keepalive 128; }
  ssl_certificate ${work}/certs/tls.crt;
  ssl_certificate_key ${work}/certs/tls.key;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache off;
  ssl_session_tickets off;
  server {
    listen 127.0.0.1:19013 ssl;
    listen 127.0.0.1:19023 ssl http2; # nginx 1.22 (Debian 12) spelling
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


# wrk_run name kind url pids...: one measurement with wrk; kind is keepalive or handshake.
wrk_run() {
  local name=$1 kind=$2 url=$3; shift 3
  local extra=()
  [[ "${kind}" == handshake ]] && extra=(-H 'Connection: close')
  wrk -t1 -c50 -d2s -H 'Host: bench.example.com' "${extra[@]}" "${url}" >/dev/null # warm up
  local before; before=$(ticks "$@")
  wrk -t1 -c50 -d"${duration}" --latency -H 'Host: bench.example.com' "${extra[@]}" "${url}" > "${work}/out.txt"
  local cpu requests
  cpu=$(( $(ticks "$@") - before ))
  requests=$(awk '/requests in/ {print $1}' "${work}/out.txt")
  echo "${kind} ${name} $(awk '/Requests\/sec/ {print $2}' "${work}/out.txt") $(to_ms "$(awk '$1 == "99%" {print $2}' "${work}/out.txt")") \
    $(awk -v c="${cpu}" -v hz="${hz}" -v r="${requests}" 'BEGIN { printf "%.1f", c / hz * 1e6 / r }')"
}
# h2_run name url pids...: one measurement with h2load over HTTP/2 (one stream per
# connection at a time, as a browser's page load is not).
h2_run() {
  local name=$1 url=$2; shift 2
  h2load -c50 -m1 -D 2 -H ':authority: bench.example.com' "${url}" >/dev/null 2>&1 # warm up
  local before; before=$(ticks "$@")
  h2load -c50 -m1 -D "${duration%s}" -H ':authority: bench.example.com' "${url}" > "${work}/out.txt" 2>&1
  local cpu requests
  cpu=$(( $(ticks "$@") - before ))
  requests=$(awk '/^requests:/ {print $8}' "${work}/out.txt")
  # h2load prints no percentiles; the mean request time stands in for latency.
  # Requests that did not get a 2xx count as failures: a run with any is refused.
  grep -q ' 0 failed' "${work}/out.txt" || { echo "h2load against ${name}: requests failed" >&2; cat "${work}/out.txt" >&2; exit 1; }
  echo "http2 ${name} $(awk '/^finished in/ {gsub(",","",$4); print $4}' "${work}/out.txt") \
    $(awk '/time for request:/ {print $5}' "${work}/out.txt" | while read -r v; do to_ms "$v"; done) \
    $(awk -v c="${cpu}" -v hz="${hz}" -v r="${requests}" 'BEGIN { printf "%.1f", c / hz * 1e6 / r }')"
}

: > "${work}/results"
for _ in $(seq "${rounds}"); do
  wrk_run nginx keepalive https://127.0.0.1:19013/ "${nginx_workers[@]}" >> "${work}/results"
  wrk_run proxy keepalive https://127.0.0.1:19012/ "${proxy_pid}" >> "${work}/results"
  wrk_run nginx handshake https://127.0.0.1:19013/ "${nginx_workers[@]}" >> "${work}/results"
  wrk_run proxy handshake https://127.0.0.1:19012/ "${proxy_pid}" >> "${work}/results"
  h2_run nginx https://127.0.0.1:19023/ "${nginx_workers[@]}" >> "${work}/results"
  h2_run go-net-http https://127.0.0.1:19022/ "${proxy_pid}" >> "${work}/results"
done
col() { awk -v k="$1" -v n="$2" -v c="$3" '$1 == k && $2 == n { print $c }' "${work}/results" | median; }
echo "each run (kind, name, per second, p99 ms (http2: mean), CPU us per request):"
sed 's/^/  /' "${work}/results"
echo "medians of ${rounds} alternating rounds:"
for kind in keepalive handshake; do
  a=$(col "${kind}" proxy 3); b=$(col "${kind}" nginx 3); c=$(col "${kind}" proxy 4); d=$(col "${kind}" nginx 4)
  e=$(col "${kind}" proxy 5); f=$(col "${kind}" nginx 5)
  printf '%-10s nginx %9s/s p99 %6sms %7s us | proxy %9s/s p99 %6sms %7s us | ratio proxy/nginx: %.2fx per second, %.2fx p99, %.2fx CPU\n' \
    "${kind}" "${b}" "${d}" "${f}" "${a}" "${c}" "${e}" "$(awk -v a="$a" -v b="$b" 'BEGIN{print a/b}')" \
    "$(awk -v a="$c" -v b="$d" 'BEGIN{print a/b}')" "$(awk -v a="$e" -v b="$f" 'BEGIN{print a/b}')"
done
a=$(col http2 go-net-http 3); b=$(col http2 nginx 3); c=$(col http2 go-net-http 4); d=$(col http2 nginx 4)
e=$(col http2 go-net-http 5); f=$(col http2 nginx 5)
printf '%-10s nginx %9s/s mean %6sms %7s us | Go net/http %9s/s mean %6sms %7s us | ratio Go/nginx: %.2fx per second, %.2fx mean, %.2fx CPU\n' \
  http2 "${b}" "${d}" "${f}" "${a}" "${c}" "${e}" "$(awk -v a="$a" -v b="$b" 'BEGIN{print a/b}')" \
  "$(awk -v a="$c" -v b="$d" 'BEGIN{print a/b}')" "$(awk -v a="$e" -v b="$f" 'BEGIN{print a/b}')"
