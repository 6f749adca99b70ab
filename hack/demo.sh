#!/usr/bin/env bash
# The whole system on this machine, in one command (make demo): a real kube-apiserver
# and etcd built from Go modules, the Cloudflare and Route53 API emulators, two edges'
# health endpoints, two regions' backends, Redis when installed, and the operator with
# its embedded proxy. It then tells the story with real commands and their output:
# records in both providers, requests routed to the tenant's region by the embedded
# and a standalone proxy, a failover and a failback, a Redis outage survived, a
# provider API outage caught up, a tenant pinned with kubectl tenantroute, and every
# metric the dashboard and the alerts use checked against the running processes.
#
#   DEMO_NONINTERACTIVE=1  run the story and exit instead of staying up for exploration
#   DEMO_QUIET=1           no narration, only the checks (make e2e)
#
# Every step is checked; a failed check stops the demo with exit status 1. Ctrl-C or
# make demo-down (hack/demo.sh down) stops everything it started.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
dir="${DEMO_DIR:-${root}/.demo}"
quiet="${DEMO_QUIET:-0}"
interactive=1
[[ "${DEMO_NONINTERACTIVE:-0}" == 1 || "${quiet}" == 1 ]] && interactive=0

mkdir -p "${dir}"
# stop_pids stops the processes listed in $dir/pids, in reverse order, each given 15 s
# to stop cleanly (the control plane stops its kube-apiserver and etcd) before it is
# killed.
stop_pids() {
  [[ -s "${dir}/pids" ]] || return 0
  tac "${dir}/pids" | while read -r pid _; do
    kill "${pid}" 2>/dev/null || continue
    for _ in $(seq 150); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
    kill -9 "${pid}" 2>/dev/null || true
  done
  : > "${dir}/pids"
}
if [[ "${1:-}" == down ]]; then # make demo-down
  if [[ -s "${dir}/demo.pid" ]] && kill "$(cat "${dir}/demo.pid")" 2>/dev/null; then
    pid=$(cat "${dir}/demo.pid")
    for _ in $(seq 600); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
  fi
  stop_pids
  rm -f "${dir}/demo.pid"
  exit 0
fi
if [[ -s "${dir}/pids" ]]; then
  echo "a demo is already running (${dir}/pids); stop it with: make demo-down" >&2
  exit 1
fi
: > "${dir}/pids"
echo $$ > "${dir}/demo.pid"

# --- output -----------------------------------------------------------------------
bold=$'\e[1m'; dim=$'\e[2m'; green=$'\e[32m'; red=$'\e[31m'; reset=$'\e[0m'
[[ -t 1 ]] || { bold=; dim=; green=; red=; reset=; }
say() { [[ "${quiet}" == 1 ]] || printf '\n%s%s%s\n' "${bold}" "$*" "${reset}"; }
note() { [[ "${quiet}" == 1 ]] || printf '%s%s%s\n' "${dim}" "$*" "${reset}"; }
# show runs a command, printing it and its output as a user would see them.
show() {
  if [[ "${quiet}" == 1 ]]; then "$@" >/dev/null 2>&1 || true; return; fi
  local shown=() a
  for a in "$@"; do [[ "$a" =~ [[:space:]\{\}\*\'\"] ]] && shown+=("'$a'") || shown+=("$a"); done
  printf '%s$ %s%s\n' "${green}" "${shown[*]}" "${reset}"
  "$@" 2>&1 | sed 's/^/  /' || true
}
# check waits up to $2 seconds for the command to succeed; on timeout it fails the demo.
check() {
  local what="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then
      printf '%sFAILED: %s%s\n' "${red}" "${what}" "${reset}" >&2
      printf 'last attempt (%s):\n' "$*" >&2
      "$@" 2>&1 | tail -20 >&2 || true
      printf 'logs are in %s\n' "${dir}" >&2
      exit 1
    fi
    sleep 0.5
  done
  printf '%sok%s %s\n' "${green}" "${reset}" "${what}"
}

# --- lifecycle ----------------------------------------------------------------------
start() { # name, command...: run in the background, log to $dir/name.log
  local name="$1"; shift
  "$@" > "${dir}/${name}.log" 2>&1 &
  echo "$! ${name}" >> "${dir}/pids"
  disown $! # its end is the demo's business, not the shell's job table
}
down() {
  trap - EXIT INT TERM
  [[ -n "${sleep_pid:-}" ]] && kill "${sleep_pid}" 2>/dev/null
  [[ -s "${dir}/pids" ]] && note "stopping the demo's processes"
  stop_pids
  rm -f "${dir}/demo.pid"
}
trap down EXIT
trap 'exit 130' INT
trap 'exit 0' TERM # make demo-down

# --- build ----------------------------------------------------------------------------
say "Building what is missing (the API server takes about 6 minutes the very first time)"
hack/build-envtest-assets.sh > "${dir}/build.log" 2>&1 || { cat "${dir}/build.log" >&2; exit 1; }
go build -o bin/manager ./cmd
go build -o bin/provider-emulators ./cmd/provider-emulators
go build -o bin/demo ./hack/demo
go build -o bin/kubectl-tenantroute ./cmd/kubectl-tenantroute
make -s test-tools # Pebble, Let's Encrypt's ACME test server, from its Go module
# kubectl finds its plugins on the PATH: kubectl tenantroute runs bin/kubectl-tenantroute.
export PATH="${root}/bin:${PATH}"

read -r p_cf p_r53 p_edge_cf p_edge_aws p_eu p_us p_proxy p_lookup p_redis p_metrics p_probes p_dns p_dns_admin \
  p_fleet p_fleet_metrics p_fleet_probes p_tls p_pebble p_pebble_mgmt p_acme_dns p_acme_dns_mgmt \
  < <(bin/demo freeports 21 | tr '\n' ' '; echo)
proxy="http://127.0.0.1:${p_proxy}"

# --- control plane ---------------------------------------------------------------------
say "1. A local control plane: etcd and kube-apiserver from bin/k8s"
rm -f "${dir}/kubeconfig"
start controlplane bin/demo controlplane -dir "${dir}"
check "kube-apiserver is up" 60 test -s "${dir}/kubeconfig"
export KUBECONFIG="${dir}/kubeconfig"
check "kubectl reaches it" 30 kubectl get --raw /readyz
note "KUBECONFIG=${dir}/kubeconfig kubectl ... works beside the demo"
show kubectl apply -k config/crd
check "the CRDs are established" 30 kubectl wait --for condition=established --timeout=5s crd/tenantroutes.routing.tenantroute.io crd/edgeproviders.routing.tenantroute.io crd/regions.routing.tenantroute.io

# --- the world around the operator ------------------------------------------------------
say "2. The providers' API emulators, the edges' health endpoints, the regions' backends"
start emulators bin/provider-emulators --cloudflare-listen "127.0.0.1:${p_cf}" --route53-listen "127.0.0.1:${p_r53}" --zones auth.example.com
start servers bin/demo servers --edge-cloudflare "127.0.0.1:${p_edge_cf}" --edge-aws "127.0.0.1:${p_edge_aws}" \
  --region-eu-west "127.0.0.1:${p_eu}" --region-us-east "127.0.0.1:${p_us}" \
  --dns "127.0.0.1:${p_dns}" --dns-admin "127.0.0.1:${p_dns_admin}"
check "the Cloudflare API emulator answers" 20 curl -sf "http://127.0.0.1:${p_cf}/__admin/counters"
check "the Route53 API emulator answers" 20 curl -sf "http://127.0.0.1:${p_r53}/__admin/counters"
check "the edges' health endpoints answer" 20 curl -sf "http://127.0.0.1:${p_edge_cf}/healthz"
# The secrets operator and proxies share, in files as mounted Secrets would be: the
# lookup endpoint's token and the key that authenticates the routes in Redis.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "${dir}/lookup-token"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "${dir}/redis-hmac-key"
redis_args=()
if command -v redis-server >/dev/null; then
  start redis redis-server --port "${p_redis}" --bind 127.0.0.1 --save "" --appendonly no --protected-mode no
  check "Redis answers" 20 bash -c "exec 3<>/dev/tcp/127.0.0.1/${p_redis}"
  redis_args=(--redis-addr "127.0.0.1:${p_redis}" --redis-hmac-key-file "${dir}/redis-hmac-key")
  note "Redis on port ${p_redis}: the operator keeps it filled, the proxy reads it"
else
  note "redis-server is not installed: the proxy runs without its shared KV (apt-get install redis-server)"
fi

# Pebble, Let's Encrypt's test CA, validates on the proxy's ports; its DNS server
# resolves every name (login.acme.com too) to 127.0.0.1.
mkdir -p "${dir}/pebble"
start acme-dns bin/pebble-challtestsrv -defaultIPv4 127.0.0.1 -defaultIPv6 "" -dnsserver "127.0.0.1:${p_acme_dns}" \
  -management "127.0.0.1:${p_acme_dns_mgmt}" -http01 "" -https01 "" -tlsalpn01 "" -doh ""
pebble_cfg=$(bin/demo pebble-config -dir "${dir}/pebble" -listen "127.0.0.1:${p_pebble}" \
  -management "127.0.0.1:${p_pebble_mgmt}" -http-port "${p_proxy}" -tls-port "${p_tls}")
start pebble env PEBBLE_VA_NOSLEEP=1 bin/pebble -config "${pebble_cfg}" -dnsserver "127.0.0.1:${p_acme_dns}"
check "the ACME server (Pebble) answers" 30 curl -sf --cacert "${dir}/pebble/api.crt" "https://127.0.0.1:${p_pebble}/dir"

# --- the operator ------------------------------------------------------------------------
say "3. The operator, with its embedded proxy on ${proxy} and https://127.0.0.1:${p_tls}"
kubectl create namespace tenantroute-system >/dev/null
kubectl -n tenantroute-system create secret generic cloudflare-token --from-literal=token=emulator-token >/dev/null
kubectl -n tenantroute-system create secret generic aws-credentials \
  --from-literal=access-key-id=AKIAEMULATOR --from-literal=secret-access-key=emulator-secret >/dev/null
start manager bin/manager --namespace tenantroute-system --metrics-bind-address "127.0.0.1:${p_metrics}" \
  --health-probe-bind-address "127.0.0.1:${p_probes}" --proxy-bind-address "127.0.0.1:${p_proxy}" \
  --lookup-bind-address "127.0.0.1:${p_lookup}" --lookup-token-file "${dir}/lookup-token" \
  --dns-resolver "127.0.0.1:${p_dns}" --custom-domain-check-interval 2s \
  --route-cache-ttl 2s "${redis_args[@]}" \
  --tls-bind-address "127.0.0.1:${p_tls}" --acme-ca "https://127.0.0.1:${p_pebble}/dir" --acme-ca-roots "${dir}/pebble/api.crt" \
  --acme-storage-dir "${dir}/acme" --certificate-status-interval 2s --https-redirect-port 0
check "the manager is healthy" 60 curl -sf "http://127.0.0.1:${p_probes}/readyz"
note "HTTPS on ${p_tls}: certificates on demand from Pebble, for granted hostnames only (the redirect from HTTP is off"
note "here so that the plain-HTTP steps below stay plain; by default it is on)"

cat > "${dir}/objects.yaml" <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: tenants}
---
apiVersion: routing.tenantroute.io/v1alpha1
kind: Region
metadata: {name: eu-west}
spec:
  backends: [{url: "http://127.0.0.1:${p_eu}"}]
---
apiVersion: routing.tenantroute.io/v1alpha1
kind: Region
metadata: {name: us-east}
spec:
  backends: [{url: "http://127.0.0.1:${p_us}"}]
---
apiVersion: routing.tenantroute.io/v1alpha1
kind: EdgeProvider
metadata: {name: cloudflare}
spec:
  zones: [{name: auth.example.com}]
  cloudflare:
    apiTokenSecretRef: {name: cloudflare-token, key: token}
    baseURL: "http://127.0.0.1:${p_cf}/client/v4/"
  edge:
    target: "{{ .Hostname }}.cdn.cloudflare.net"
  healthCheck:
    url: "http://127.0.0.1:${p_edge_cf}/healthz"
    interval: 1s
    timeout: 500ms
    failbackHoldDown: 5s
---
apiVersion: routing.tenantroute.io/v1alpha1
kind: EdgeProvider
metadata: {name: aws}
spec:
  zones: [{name: auth.example.com}]
  route53:
    endpoint: "http://127.0.0.1:${p_r53}"
    credentialsSecretRef: {name: aws-credentials}
  edge: {target: edge-aws.example.net}
  healthCheck:
    url: "http://127.0.0.1:${p_edge_aws}/healthz"
    interval: 1s
    timeout: 500ms
    failbackHoldDown: 5s
---
apiVersion: routing.tenantroute.io/v1alpha1
kind: TenantRoute
metadata: {name: acme, namespace: tenants}
spec:
  tenantID: acme
  region: eu-west
  hostnames: [acme.auth.example.com, login.acme.com]
  edges: [cloudflare, aws]
---
apiVersion: routing.tenantroute.io/v1alpha1
kind: TenantRoute
metadata: {name: globex, namespace: tenants}
spec:
  tenantID: globex
  region: us-east
  hostnames: [globex.auth.example.com]
  edges: [cloudflare, aws]
YAML
note "the proxies keep routes in memory for 2 s here (30 s by default), so that step 8 shows Redis at work"
note "the objects are config/samples pointed at the local endpoints, with 1 s health checks and a 5 s hold-down"
show kubectl apply -f "${dir}/objects.yaml"

ready() { [[ "$(kubectl -n tenants get tenantroute "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]; }
active() { [[ "$(kubectl -n tenants get tenantroute "$1" -o jsonpath='{.status.activeEdge}')" == "$2" ]]; }
check "TenantRoute acme is Ready" 60 ready acme
check "TenantRoute globex is Ready" 60 ready globex
show kubectl get tenantroutes -A
show kubectl get edgeproviders
show kubectl get regions

# --- records ---------------------------------------------------------------------------
say "4. The records, in both providers at once, pointing at the active edge (Cloudflare)"
cf_records() { curl -sf "http://127.0.0.1:${p_cf}/__admin/records"; }
r53_records() { curl -sf "http://127.0.0.1:${p_r53}/__admin/records"; }
cf_points() { cf_records | grep -qE "^$1	CNAME	[0-9]+	$2	"; }
r53_points() { r53_records | grep -qE "^$1\.	CNAME	[0-9]+	$2\.$"; }
check "Cloudflare has acme.auth.example.com -> the Cloudflare edge" 30 cf_points acme.auth.example.com acme.auth.example.com.cdn.cloudflare.net
check "Route53 has acme.auth.example.com -> the Cloudflare edge" 30 r53_points acme.auth.example.com acme.auth.example.com.cdn.cloudflare.net
note "Cloudflare (name, type, TTL, content, proxied, comment = ownership marker):"
show curl -s "http://127.0.0.1:${p_cf}/__admin/records"
note "Route53 (name, type, TTL, values; ownership in the _tenantroute-* registry records):"
show curl -s "http://127.0.0.1:${p_r53}/__admin/records"
note "login.acme.com is a custom domain: no record, and no traffic until its owner proves control"
show kubectl -n tenants get tenantroute acme -o jsonpath='{.status.customDomains}{"\n"}'
note "kubectl tenantroute (bin/kubectl-tenantroute) shows the same from the providers' side:"
show kubectl tenantroute status acme -n tenants
unrouted() { [[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $1" "${proxy}/")" == 404 ]]; }
check "login.acme.com is not routed before its proof" 10 unrouted login.acme.com
note "the tenant creates, in its own DNS, the TXT and the CNAME the status tells"
challenge=$(kubectl -n tenants get tenantroute acme -o jsonpath='{.status.customDomains[0].challengeValue}')
target=$(kubectl -n tenants get tenantroute acme -o jsonpath='{.status.customDomains[0].cnameTarget}')
show curl -s -X POST "http://127.0.0.1:${p_dns_admin}/records?name=_tenantroute-challenge.login.acme.com&type=TXT&value=${challenge}"
show curl -s -X POST "http://127.0.0.1:${p_dns_admin}/records?name=login.acme.com&type=CNAME&value=${target}"
granted() { kubectl -n tenants get tenantroute acme -o jsonpath='{.status.hostnames[?(@.hostname=="login.acme.com")].state}' | grep -qx Granted; }
check "login.acme.com is granted once proven" 30 granted

# --- routing ---------------------------------------------------------------------------
say "5. Requests through the proxy reach the tenant's own region"
routed() { curl -sf -H "Host: $1" "${proxy}/" | grep -q "\"region\":\"$2\""; }
check "acme.auth.example.com is served by eu-west" 30 routed acme.auth.example.com eu-west
check "login.acme.com (custom domain) is served by eu-west" 30 routed login.acme.com eu-west
check "globex.auth.example.com is served by us-east" 30 routed globex.auth.example.com us-east
show curl -s -H "Host: acme.auth.example.com" "${proxy}/login"
show curl -s -H "Host: globex.auth.example.com" "${proxy}/"
show curl -s -o /dev/null -w '%{http_code} for an unknown host\n' -H "Host: nobody.example.com" "${proxy}/"
fleet="http://127.0.0.1:${p_fleet}"
note "a standalone proxy, as the proxy fleet runs (--mode=proxy): routes from memory, then Redis, then the operator's lookup endpoint"
start fleet-proxy bin/manager --mode=proxy --proxy-bind-address "127.0.0.1:${p_fleet}" \
  --lookup-url "http://127.0.0.1:${p_lookup}" --lookup-token-file "${dir}/lookup-token" \
  --metrics-bind-address "127.0.0.1:${p_fleet_metrics}" --health-probe-bind-address "127.0.0.1:${p_fleet_probes}" \
  --route-cache-ttl 2s "${redis_args[@]}"
check "the standalone proxy serves acme.auth.example.com from eu-west" 30 bash -c \
  "curl -sf -H 'Host: acme.auth.example.com' ${fleet}/ | grep -q '\"region\":\"eu-west\"'"
show curl -s -H "Host: globex.auth.example.com" "${fleet}/"

# --- failover --------------------------------------------------------------------------
say "6. The Cloudflare edge fails: traffic moves to the AWS edge"
show curl -s -X POST "http://127.0.0.1:${p_edge_cf}/down"
check "every record in Cloudflare points at the AWS edge" 30 cf_points acme.auth.example.com edge-aws.example.net
check "every record in Route53 points at the AWS edge" 30 r53_points acme.auth.example.com edge-aws.example.net
check "globex moved too" 30 cf_points globex.auth.example.com edge-aws.example.net
check "acme reports the AWS edge active" 30 active acme aws
show kubectl get tenantroutes -A
show kubectl get edgeproviders
check "each TenantRoute got a FailedOver event" 10 bash -c "kubectl get events -n tenants --field-selector reason=FailedOver -o name | wc -l | grep -qx 2"
show kubectl get events -n tenants --field-selector reason=FailedOver
show kubectl get events --field-selector reason=FailedOver
check "requests are still served from eu-west" 10 routed acme.auth.example.com eu-west
note "off Cloudflare, the proxy terminates TLS itself: the custom domain login.acme.com over HTTPS, its"
note "certificate obtained from the ACME server on this first handshake (the CA's root from Pebble):"
curl -s --cacert "${dir}/pebble/api.crt" "https://127.0.0.1:${p_pebble_mgmt}/roots/0" > "${dir}/pebble/root.pem"
https_routed() { curl -sf --max-time 30 --cacert "${dir}/pebble/root.pem" --resolve "login.acme.com:${p_tls}:127.0.0.1" \
  "https://login.acme.com:${p_tls}/" | grep -q '"region":"eu-west"'; }
check "https://login.acme.com is served from eu-west with a certificate the CA issued" 60 https_routed
show curl -sS --cacert "${dir}/pebble/root.pem" --resolve "login.acme.com:${p_tls}:127.0.0.1" \
  -w '%{http_code}, certificate verified: %{ssl_verify_result} (0 = yes)\n' "https://login.acme.com:${p_tls}/"
no_cert() { ! curl -s --max-time 5 --cacert "${dir}/pebble/root.pem" --resolve "random.attacker.test:${p_tls}:127.0.0.1" \
  -o /dev/null "https://random.attacker.test:${p_tls}/"; }
check "a hostname without a route gets no certificate (and causes no ACME order)" 10 no_cert
issued() { kubectl -n tenants get tenantroute acme -o jsonpath='{.status.certificates[?(@.hostname=="login.acme.com")].state}' | grep -qx Issued; }
check "acme's status reports the certificate of login.acme.com" 30 issued
show kubectl -n tenants get tenantroute acme -o jsonpath='{range .status.certificates[*]}{.hostname}: {.state} {.issuer} until {.notAfter}{"\n"}{end}'

say "7. It recovers: after 2 good probes and the 5 s hold-down, traffic fails back"
show curl -s -X POST "http://127.0.0.1:${p_edge_cf}/up"
check "records point at the Cloudflare edge again" 60 cf_points acme.auth.example.com acme.auth.example.com.cdn.cloudflare.net
check "in Route53 too" 30 r53_points acme.auth.example.com acme.auth.example.com.cdn.cloudflare.net
check "acme reports the Cloudflare edge active" 30 active acme cloudflare
check "each TenantRoute got one FailedBack event" 10 bash -c "kubectl get events -n tenants --field-selector reason=FailedBack -o name | wc -l | grep -qx 2"
show kubectl get events -n tenants --field-selector reason=FailedBack
note "nothing left to change: the providers hold what the operator wants"
check "kubectl tenantroute plan -A finds no changes" 30 bash -c "kubectl tenantroute plan -A --exit-code"
show kubectl tenantroute plan -A

# --- cache outage ------------------------------------------------------------------------
say "8. Redis, the proxy fleet's shared cache, dies: requests are still answered"
if [[ ${#redis_args[@]} -gt 0 ]]; then
  redis_pid=$(awk '$2 == "redis" {print $1}' "${dir}/pids")
  show kill -9 "${redis_pid}"
  failures=0
  # Over 4 s the in-memory routes expire twice: lookups go to Redis, find it dead, and
  # the lookup falls through to the source of truth.
  for i in $(seq 200); do
    host=acme.auth.example.com; region=eu-west
    (( i % 2 )) && { host=globex.auth.example.com; region=us-east; }
    curl -sf -H "Host: ${host}" "${fleet}/" | grep -q "\"region\":\"${region}\"" || failures=$((failures + 1))
    sleep 0.02
  done
  note "200 requests to the standalone proxy over 4 s with Redis dead: ${failures} failed or misrouted"
  check "no request failed while Redis was down" 1 test "${failures}" -eq 0
  check "lookups found Redis dead and fell through to the lookup endpoint" 10 bash -c \
    "curl -s http://127.0.0.1:${p_fleet_metrics}/metrics | grep -qE 'layer=\"redis\",result=\"(error|breaker_open)\"' &&
     curl -s http://127.0.0.1:${p_fleet_metrics}/metrics | grep -qE 'layer=\"source\",result=\"hit\"'"
  show bash -c "curl -s http://127.0.0.1:${p_fleet_metrics}/metrics | grep -E '^tenantroute_proxy_lookups_total'"
else
  note "skipped: redis-server is not installed"
fi

# --- provider API outage ------------------------------------------------------------------
say "9. The Cloudflare API fails: a new tenant gets Route53 now and Cloudflare when it returns"
show curl -s -X PUT "http://127.0.0.1:${p_cf}/__admin/faults" -d '{"outage": true}'
cat > "${dir}/initech.yaml" <<YAML
apiVersion: routing.tenantroute.io/v1alpha1
kind: TenantRoute
metadata: {name: initech, namespace: tenants}
spec:
  tenantID: initech
  region: us-east
  hostnames: [initech.auth.example.com]
  edges: [cloudflare, aws]
YAML
show kubectl apply -f "${dir}/initech.yaml"
check "Route53 has initech.auth.example.com" 30 r53_points initech.auth.example.com initech.auth.example.com.cdn.cloudflare.net
not_ready() { [[ "$(kubectl -n tenants get tenantroute initech -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == False ]]; }
check "initech is not Ready while Cloudflare refuses" 30 not_ready
show kubectl -n tenants get tenantroute initech -o jsonpath='{.status.providers}{"\n"}'
show curl -s -X PUT "http://127.0.0.1:${p_cf}/__admin/faults" -d '{}'
check "Cloudflare gets initech.auth.example.com once it answers again" 90 cf_points initech.auth.example.com initech.auth.example.com.cdn.cloudflare.net
check "initech is Ready" 60 ready initech

# --- maintenance ---------------------------------------------------------------------------
say "10. Someone edits a record by hand; a tenant is pinned to the AWS edge for maintenance"
zone_id=$(kubectl get edgeprovider cloudflare -o jsonpath='{.status.zones[0].id}')
cf_api="http://127.0.0.1:${p_cf}/client/v4/zones/${zone_id}/dns_records"
record_id=$(curl -s -H "Authorization: Bearer emulator-token" "${cf_api}?name=acme.auth.example.com&type=CNAME" |
  grep -o '"id":"[^"]*"' | head -1 | cut -d'"' -f4)
note "acme.auth.example.com is changed in Cloudflare behind the operator's back:"
show curl -s -o /dev/null -w '%{http_code}\n' -X POST -H "Authorization: Bearer emulator-token" -H "Content-Type: application/json" \
  "${cf_api}/batch" -d "{\"patches\": [{\"id\": \"${record_id}\", \"content\": \"hijacked.example.org\"}]}"
check "kubectl tenantroute plan -A shows the exact repair" 10 bash -c "kubectl tenantroute plan -A |
  grep -qx '  ~ cloudflare/auth.example.com: update acme.auth.example.com CNAME 60 acme.auth.example.com.cdn.cloudflare.net (now hijacked.example.org)'"
show kubectl tenantroute plan -A
both_on_aws() { cf_points acme.auth.example.com edge-aws.example.net && r53_points acme.auth.example.com edge-aws.example.net; }
pinned_at=${EPOCHREALTIME}
show kubectl tenantroute pin acme aws -n tenants --reason "Cloudflare maintenance window"
check "acme's records point at the AWS edge in both providers within 10 s" 10 both_on_aws
note "pin to records moved in both providers: $(awk -v a="${pinned_at}" -v b="${EPOCHREALTIME}" 'BEGIN {printf "%.1f", b - a}') s"
show kubectl tenantroute status acme -n tenants
show kubectl tenantroute unpin acme -n tenants
check "acme's records point at the Cloudflare edge again" 30 cf_points acme.auth.example.com acme.auth.example.com.cdn.cloudflare.net
check "kubectl tenantroute plan -A finds nothing left to change" 30 bash -c "kubectl tenantroute plan -A --exit-code"

# --- observability -------------------------------------------------------------------------
say "11. Every metric the Grafana dashboard and the alert rules use is served"
if [[ ${#redis_args[@]} -gt 0 ]]; then
  check "the dashboard's and the alerts' metrics exist (config/grafana, config/prometheus)" 30 \
    bin/demo metrics "http://127.0.0.1:${p_metrics}/metrics" "http://127.0.0.1:${p_fleet_metrics}/metrics"
  show bin/demo metrics "http://127.0.0.1:${p_metrics}/metrics" "http://127.0.0.1:${p_fleet_metrics}/metrics"
else
  note "skipped: the Redis alerts need Redis (apt-get install redis-server)"
fi

say "The story is over."
note "Everything it used is in ${dir} (logs, kubeconfig, objects.yaml)."
if [[ "${interactive}" == 1 ]]; then
  printf '\nThe demo keeps running for exploration. Try:\n'
  printf '  export KUBECONFIG=%s\n' "${dir}/kubeconfig"
  printf '  kubectl get tenantroutes,edgeproviders,regions -A\n'
  printf '  export PATH=%s/bin:$PATH; kubectl tenantroute status acme -n tenants\n' "${root}"
  printf '  curl -H "Host: acme.auth.example.com" %s/\n' "${proxy}"
  printf '  curl -X POST http://127.0.0.1:%s/down      # the Cloudflare edge fails\n' "${p_edge_cf}"
  printf '  curl -X PUT http://127.0.0.1:%s/__admin/faults -d %s   # the Cloudflare API fails\n' "${p_cf}" "'{\"outage\": true}'"
  printf 'Stop it with Ctrl-C, or make demo-down from another shell.\n'
  # wait, unlike a foreground sleep, lets the traps run as soon as a signal comes.
  while true; do sleep 3600 & sleep_pid=$!; wait "${sleep_pid}"; done
fi
