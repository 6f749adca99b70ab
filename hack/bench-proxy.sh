#!/usr/bin/env bash
# Measures the proxy beside what a platform team would run instead: nginx, HAProxy and
# Caddy (Debian packages, each configured as its documentation recommends for a
# reverse proxy keeping connections to the backend alive), and hack/bench/floor (the
# cheapest HTTP/1.1 forwarder Go can be here: no parsing, no lookup, no limits). Same Go
# backend (512-byte answers), same load generator (wrk -t1 -c50), alternating rounds;
# prints each one's requests/s, p99, CPU per request and the backend's CPU per request,
# and the first three's ratios to nginx.
#
#   KINDS="plain tls hosts"   the rounds (default all three):
#     plain  HTTP/1.1 keep-alive, one hostname
#     tls    the same over HTTPS (ECDSA P-256; TLS 1.3), keep-alive (the floor has no TLS;
#            hack/bench-tls.sh measures handshakes and HTTP/2 beside nginx)
#     hosts  10,000 hostnames, one picked per request by a Zipf law (s = 1,
#            hack/bench/zipf.lua): the host -> tenant lookup and each peer's vhost
#            matching on the path; an unknown host would be a 404 and fails the run
#   ROUNDS=3 DURATION=10s     rounds of each kind and the length of one measurement
#   PEERS="nginx haproxy caddy floor loop"   who runs beside "proxy" (the proxy with
#                             HTTPS on, so on the fasthttp engine; --proxy-engine fasthttp
#                             without it): "loop" is the proxy without HTTPS, on its
#                             default loop engine (plain HTTP only); "floorwork" adds the
#                             floor doing the proxy's per-request work (floor -work),
#                             "floorinplace" the same work line by line, as nginx does it
#                             (floor -work -inplace); "nginx2" a second nginx, configured
#                             as the first: its ratios to nginx are the measurement's own
#                             spread, what any contender's could show from noise alone
# Needs nginx, haproxy, caddy and wrk (hack/ensure-deps.sh bench installs them).
set -euo pipefail
# shellcheck source=bench/measure.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench/measure.sh"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
duration="${DURATION:-10s}"
rounds="${ROUNDS:-3}"
kinds="${KINDS:-plain tls hosts}"
peers="${PEERS:-nginx haproxy caddy floor loop}"
nhosts=10000
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "${work}"; }
trap cleanup EXIT

"$(dirname "${BASH_SOURCE[0]}")/ensure-deps.sh" bench
(cd "${root}" && go build -o "${work}/backend" ./hack/bench/backend && go build -o "${work}/proxy" ./hack/bench/proxy &&
  go build -o "${work}/floor" ./hack/bench/floor)
mkdir -p "${work}/certs"
"${work}/proxy" -gen-cert "${work}/certs"
cat "${work}/certs/tls.crt" "${work}/certs/tls.key" > "${work}/certs/haproxy.pem"
for i in $(seq 0 $((nhosts - 1))); do echo "t${i}.bench.example.com"; done > "${work}/hosts"

# Ports: plain 190x2..6, TLS 1901x, many hosts 1903x; x = 2 proxy, 3 nginx, 4 floor,
# 5 HAProxy, 6 Caddy, 7 the second nginx (plain on 19010). The proxy and the floor serve
# every hostname on one port.
declare -A port=(
  [plain.proxy]=19002 [tls.proxy]=19012 [hosts.proxy]=19002
  [plain.nginx]=19003 [tls.nginx]=19013 [hosts.nginx]=19033
  [plain.floor]=19004 [hosts.floor]=19004
  [plain.floorwork]=19007 [hosts.floorwork]=19007
  [plain.floorinplace]=19008 [hosts.floorinplace]=19008
  [plain.loop]=19009 [hosts.loop]=19009
  [plain.haproxy]=19005 [tls.haproxy]=19015 [hosts.haproxy]=19035
  [plain.caddy]=19006 [tls.caddy]=19016 [hosts.caddy]=19036
  [plain.nginx2]=19010 [tls.nginx2]=19017 [hosts.nginx2]=19037
)
declare -A cpu_pids

"${work}/backend" -listen 127.0.0.1:19001 & pids+=($!)
backend_pid=$!
"${work}/proxy" -listen 127.0.0.1:19002 -backend http://127.0.0.1:19001 -hosts "${nhosts}" \
  -tls-listen 127.0.0.1:19012 -cert-dir "${work}/certs" -engine fasthttp & pids+=($!)
cpu_pids[proxy]=$!

if [[ " ${peers} " == *" floor "* ]]; then
  "${work}/floor" -listen 127.0.0.1:19004 -backend 127.0.0.1:19001 & pids+=($!)
  cpu_pids[floor]=$!
fi
if [[ " ${peers} " == *" floorwork "* ]]; then
  "${work}/floor" -listen 127.0.0.1:19007 -backend 127.0.0.1:19001 -work -hosts "${nhosts}" & pids+=($!)
  cpu_pids[floorwork]=$!
fi

if [[ " ${peers} " == *" floorinplace "* ]]; then
  "${work}/floor" -listen 127.0.0.1:19008 -backend 127.0.0.1:19001 -work -inplace -hosts "${nhosts}" & pids+=($!)
  cpu_pids[floorinplace]=$!
fi

if [[ " ${peers} " == *" loop "* ]]; then
  "${work}/proxy" -listen 127.0.0.1:19009 -backend http://127.0.0.1:19001 -hosts "${nhosts}" -engine loop & pids+=($!)
  cpu_pids[loop]=$!
fi

if [[ " ${peers} " == *" nginx "* ]]; then
  # nginx's reverse-proxy guide: an upstream with keepalive, HTTP/1.1 and an empty
  # Connection header towards it. No cap on requests per client connection (nginx closes
  # after 1,000 by default; no other contender does). Many hosts: one server block with
  # every name (server_name's hash), and a default server answering 404.
  location="location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }"
  cat > "${work}/nginx.conf" <<NGINX
worker_processes auto;
pid ${work}/nginx.pid;
error_log ${work}/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server_names_hash_max_size 32768;
  server_names_hash_bucket_size 128;
  upstream backend { server 127.0.0.1:19001; keepalive 128; }
  ssl_certificate ${work}/certs/tls.crt;
  ssl_certificate_key ${work}/certs/tls.key;
  ssl_protocols TLSv1.2 TLSv1.3;
  server {
    listen 127.0.0.1:19003;
    listen 127.0.0.1:19013 ssl;
    ${location}
  }
  server { listen 127.0.0.1:19033 default_server; return 404; }
  server {
    listen 127.0.0.1:19033;
    server_name $(tr '\n' ' ' < "${work}/hosts");
    ${location}
  }
}
NGINX
  nginx -c "${work}/nginx.conf" -g 'daemon off;' & pids+=($!)
  sleep 1
  cpu_pids[nginx]="$(pgrep -P "${pids[-1]}" | tr '\n' ' ')"
  if [[ " ${peers} " == *" nginx2 "* ]]; then
    sed -e 's/19003/19010/; s/19013/19017/; s/19033/19037/g' -e 's|/nginx\([.-]\)|/nginx2\1|g' \
      "${work}/nginx.conf" > "${work}/nginx2.conf"
    nginx -c "${work}/nginx2.conf" -g 'daemon off;' & pids+=($!)
    sleep 1
    cpu_pids[nginx2]="$(pgrep -P "${pids[-1]}" | tr '\n' ' ')"
  fi
fi

if [[ " ${peers} " == *" haproxy "* ]]; then
  # HAProxy's defaults already keep both sides alive and reuse backend connections
  # (http-reuse safe); one thread per CPU. Many hosts: a map of the names (a tree
  # lookup), 404 for any other.
  for h in $(cat "${work}/hosts"); do echo "${h} 1"; done > "${work}/hosts.map"
  cat > "${work}/haproxy.cfg" <<HAPROXY
global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option forwardfor
frontend plain
  bind 127.0.0.1:19005
  bind 127.0.0.1:19015 ssl crt ${work}/certs/haproxy.pem
  default_backend backend
frontend hosts
  bind 127.0.0.1:19035
  http-request deny deny_status 404 unless { req.hdr(host),lower,map_str(${work}/hosts.map) -m found }
  default_backend backend
backend backend
  server s1 127.0.0.1:19001
HAPROXY
  haproxy -f "${work}/haproxy.cfg" -db & pids+=($!)
  cpu_pids[haproxy]=$!
fi

if [[ " ${peers} " == *" caddy "* ]]; then
  # Caddy's reverse_proxy (keep-alive to the upstream, X-Forwarded-*),
  # no admin endpoint, no automatic HTTPS, the benchmark's certificate. Many hosts: one
  # route matching every name (Caddy sorts a long host list and searches it).
  # Its pool keeps 32 idle connections per upstream by default; 50 clients would dial
  # afresh for every request beyond that, so it keeps 128, as nginx's upstream does.
  upstream='{"handler": "reverse_proxy", "upstreams": [{"dial": "127.0.0.1:19001"}],
    "transport": {"protocol": "http", "keep_alive": {"max_idle_conns_per_host": 128}}}'
  cat > "${work}/caddy.json" <<CADDY
{
  "admin": {"disabled": true},
  "logging": {"logs": {"default": {"level": "ERROR"}}},
  "apps": {
    "tls": {"certificates": {"load_files": [{"certificate": "${work}/certs/tls.crt", "key": "${work}/certs/tls.key"}]}},
    "http": {"servers": {
      "plain": {"listen": ["127.0.0.1:19006"], "automatic_https": {"disable": true}, "routes": [{"handle": [${upstream}]}]},
      "tls": {"listen": ["127.0.0.1:19016"], "automatic_https": {"disable": true}, "tls_connection_policies": [{}], "routes": [{"handle": [${upstream}]}]},
      "hosts": {"listen": ["127.0.0.1:19036"], "automatic_https": {"disable": true}, "routes": [
        {"match": [{"host": [$(sed 's/.*/"&"/' "${work}/hosts" | paste -sd,)]}], "handle": [${upstream}]},
        {"handle": [{"handler": "static_response", "status_code": 404}]}
      ]}
    }}
  }
}
CADDY
  caddy run --config "${work}/caddy.json" >"${work}/caddy.log" 2>&1 & pids+=($!)
  cpu_pids[caddy]=$!
fi
sleep 2

# measure kind name: one wrk run; prints "kind name requests/s p99-ms CPU-us-per-request
# backend-CPU-us-per-request". The backend's share shows what a contender's request costs
# the backend (each field it adds is parsed there), on the cores they all share.
measure() {
  local kind=$1 name=$2 scheme=http args=(-H 'Host: bench.example.com')
  [[ "${kind}" == tls ]] && scheme=https
  [[ "${kind}" == hosts ]] && args=(-s "${root}/hack/bench/zipf.lua")
  local url="${scheme}://127.0.0.1:${port[${kind}.${name}]}/"
  # shellcheck disable=SC2086 # cpu_pids holds a list of pids
  local -a ps=(${cpu_pids[${name}]})
  HOSTS="${nhosts}" wrk -t1 -c50 -d2s "${args[@]}" "${url}" >/dev/null # warm up
  local before; before=$(ticks "${ps[@]}")
  local backend_before; backend_before=$(ticks "${backend_pid}")
  HOSTS="${nhosts}" wrk -t1 -c50 -d"${duration}" --latency "${args[@]}" "${url}" > "${work}/out.txt"
  local cpu=$(( $(ticks "${ps[@]}") - before ))
  local backend_cpu=$(( $(ticks "${backend_pid}") - backend_before ))
  # A contender that answers errors (or refuses) is broken, not fast.
  if grep -qE 'Non-2xx|Socket errors' "${work}/out.txt"; then
    echo "${kind} round against ${name}: errors" >&2; cat "${work}/out.txt" >&2; exit 1
  fi
  local requests; requests=$(awk '/requests in/ {print $1}' "${work}/out.txt")
  echo "${kind} ${name} $(awk '/Requests\/sec/ {print $2}' "${work}/out.txt") $(to_ms "$(awk '$1 == "99%" {print $2}' "${work}/out.txt")")" \
    "$(awk -v c="${cpu}" -v hz="${hz}" -v r="${requests}" 'BEGIN { printf "%.1f", c / hz * 1e6 / r }')" \
    "$(awk -v c="${backend_cpu}" -v hz="${hz}" -v r="${requests}" 'BEGIN { printf "%.1f", c / hz * 1e6 / r }')"
}

# Alternate the contenders, several rounds, and compare medians: this machine's
# throughput drifts by 10-20% from one run to the next. Each round takes them in an
# order of its own (shuf): in one fixed order, a contender would always run at the same
# point of the round and after the same other one, and what that costs or spares it
# would read as its own.
: > "${work}/results"
for _ in $(seq "${rounds}"); do
  for kind in ${kinds}; do
    for name in $(printf '%s\n' proxy ${peers} | shuf); do
      [[ -n "${port[${kind}.${name}]:-}" ]] || continue
      measure "${kind}" "${name}" | tee -a "${work}/results"
    done
  done
done
col() { awk -v k="$1" -v n="$2" -v c="$3" '$1 == k && $2 == n { print $c }' "${work}/results" | median; }
echo
echo "medians of ${rounds} alternating rounds (ratios to nginx's medians):"
for kind in ${kinds}; do
  printf '%-6s %-12s %11s %9s %9s %10s %10s %8s %8s\n' "${kind}" "" "requests/s" "p99 ms" "CPU us/r" "backend/r" "x nginx/s" "x p99" "x CPU"
  ref_rps=$(col "${kind}" nginx 3); ref_p99=$(col "${kind}" nginx 4); ref_cpu=$(col "${kind}" nginx 5)
  for name in proxy ${peers}; do
    [[ -n "${port[${kind}.${name}]:-}" ]] || continue
    rps=$(col "${kind}" "${name}" 3); p99=$(col "${kind}" "${name}" 4); cpu=$(col "${kind}" "${name}" 5)
    printf '%-6s %-12s %11s %9s %9s %10s' "" "${name}" "${rps}" "${p99}" "${cpu}" "$(col "${kind}" "${name}" 6)"
    if [[ -n "${ref_rps}" ]]; then
      awk -v a="${rps}" -v b="${ref_rps}" -v c="${p99}" -v d="${ref_p99}" -v e="${cpu}" -v f="${ref_cpu}" \
        'BEGIN { printf " %9.2fx %7.2fx %7.2fx", a/b, c/d, e/f }'
    fi
    echo
  done
done
