#!/usr/bin/env bash
# Peak resident memory of the proxy process under hostile clients: a 300 MB chunked
# body (GET and POST) and a flood of 100,000 random hosts, after which the real route
# must still be served from memory. Linux only (reads and resets /proc/PID VmHWM).
# ENGINE=loop (the default) or fasthttp: the engine of the proxy's plain listener.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "${work}"; }
trap cleanup EXIT

(cd "${root}" && go build -o "${work}/backend" ./hack/bench/backend && go build -o "${work}/proxy" ./hack/bench/proxy &&
  go build -o "${work}/hostile" ./hack/bench/hostile)
"${work}/backend" -listen 127.0.0.1:19001 & pids+=($!)
"${work}/proxy" -listen 127.0.0.1:19002 -backend http://127.0.0.1:19001 -metrics 127.0.0.1:19005 -engine "${ENGINE:-loop}" & proxy_pid=$!; pids+=($proxy_pid)
for _ in $(seq 50); do curl -fs -o /dev/null -H 'Host: bench.example.com' http://127.0.0.1:19002/ && break; sleep 0.1; done
"${work}/hostile" -proxy 127.0.0.1:19002 -pid "${proxy_pid}" -metrics http://127.0.0.1:19005/metrics "$@"
