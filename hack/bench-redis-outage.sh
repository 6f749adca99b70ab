#!/usr/bin/env bash
# Measures what a Redis outage adds to the proxy's p99: routes live in memory for 1 ms
# only, so nearly every request looks its route up in Redis; then Redis is killed and
# the lookups go, through the open circuit breaker, to the lookup endpoint.
# ENGINE=loop (the default) or fasthttp: the engine of the proxy's plain listener.
# Needs redis-server and wrk (apt-get install redis-server wrk).
set -euo pipefail
# shellcheck source=bench/measure.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench/measure.sh"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
duration="${DURATION:-15s}"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "${work}"; }
trap cleanup EXIT
for tool in redis-server wrk; do command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }; done
(cd "${root}" && go build -o "${work}/backend" ./hack/bench/backend && go build -o "${work}/proxy" ./hack/bench/proxy)

redis-server --port 19379 --bind 127.0.0.1 --save "" --appendonly no >/dev/null & redis_pid=$!; pids+=($redis_pid)
"${work}/backend" -listen 127.0.0.1:19001 & pids+=($!)
sleep 0.5
"${work}/proxy" -listen 127.0.0.1:19002 -backend http://127.0.0.1:19001 -redis 127.0.0.1:19379 -route-ttl 1ms -engine "${ENGINE:-loop}" & pids+=($!)
sleep 1

run() { wrk -t1 -c50 -d"${duration}" --latency -H 'Host: bench.example.com' http://127.0.0.1:19002/ > "${work}/$1.txt"; }
p99() { awk '$1 == "99%" {print $2}' "${work}/$1.txt"; }
rps() { awk '/Requests\/sec/ {print $2}' "${work}/$1.txt"; }
errors() { awk '/Non-2xx|Socket errors/ {print}' "${work}/$1.txt"; }

wrk -t1 -c50 -d2s -H 'Host: bench.example.com' http://127.0.0.1:19002/ >/dev/null
run redis_up
kill -9 "${redis_pid}"
sleep 1
run redis_down
up=$(to_ms "$(p99 redis_up)"); down=$(to_ms "$(p99 redis_down)")
printf '%-12s %12s %10s  %s\n' "" "requests/s" "p99" "errors"
printf '%-12s %12s %10s  %s\n' "Redis up" "$(rps redis_up)" "$(p99 redis_up)" "$(errors redis_up)"
printf '%-12s %12s %10s  %s\n' "Redis down" "$(rps redis_down)" "$(p99 redis_down)" "$(errors redis_down)"
awk -v a="${down}" -v b="${up}" 'BEGIN { printf "p99 added by the Redis outage: %.3f ms\n", a-b }'
