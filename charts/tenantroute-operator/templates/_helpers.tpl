{{/* The prefix of every object's name: the release name, with the chart's name
unless the release name already holds it; at most 49 characters, so that the longest
suffix (-proxy-metrics) keeps a Service name within 63. */}}
{{- define "tenantroute.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 49 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 49 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tenantroute.labels" -}}
app.kubernetes.io/name: tenantroute-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Pods of this release; the NetworkPolicies admit them to the lookup endpoint and
Redis. */}}
{{- define "tenantroute.selector" -}}
app.kubernetes.io/name: tenantroute-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tenantroute.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "tenantroute.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (printf "%s-controller-manager" (include "tenantroute.fullname" .)) -}}
{{- end -}}

{{- define "tenantroute.sharedSecretName" -}}
{{- .Values.sharedSecret.existingSecret | default (printf "%s-shared" (include "tenantroute.fullname" .)) -}}
{{- end -}}

{{/* The Redis address, or nothing without Redis. */}}
{{- define "tenantroute.redisAddr" -}}
{{- if .Values.redis.deploy -}}
{{ include "tenantroute.fullname" . }}-redis.{{ .Release.Namespace }}.svc:6379
{{- else -}}
{{ .Values.redis.addr }}
{{- end -}}
{{- end -}}

{{/* The flags and volume mounts for Redis, shared by the manager and the proxies. */}}
{{- define "tenantroute.redisArgs" -}}
{{- $addr := include "tenantroute.redisAddr" . -}}
{{- if $addr }}
- --redis-addr={{ $addr }}
- --redis-hmac-key-file=/etc/tenantroute/shared/redis-hmac-key
{{- if .Values.redis.deploy }}
- --redis-password-file=/etc/tenantroute/redis/password
{{- else }}
{{- with .Values.redis.username }}
- --redis-username={{ . }}
{{- end }}
{{- if .Values.redis.passwordSecret.name }}
- --redis-password-file=/etc/tenantroute/redis/password
{{- end }}
{{- if .Values.redis.tls.enabled }}
- --redis-tls
{{- if .Values.redis.tls.caSecret.name }}
- --redis-ca-file=/etc/tenantroute/redis-ca/ca.crt
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "tenantroute.redisMounts" -}}
{{- if or .Values.redis.deploy (and .Values.redis.addr .Values.redis.passwordSecret.name) }}
- {name: redis-password, mountPath: /etc/tenantroute/redis, readOnly: true}
{{- end }}
{{- if and (not .Values.redis.deploy) .Values.redis.addr .Values.redis.tls.enabled .Values.redis.tls.caSecret.name }}
- {name: redis-ca, mountPath: /etc/tenantroute/redis-ca, readOnly: true}
{{- end }}
{{- end -}}

{{- define "tenantroute.redisVolumes" -}}
{{- if .Values.redis.deploy }}
- name: redis-password
  secret:
    secretName: {{ include "tenantroute.fullname" . }}-redis
    items: [{key: password, path: password}]
{{- else if and .Values.redis.addr .Values.redis.passwordSecret.name }}
- name: redis-password
  secret:
    secretName: {{ .Values.redis.passwordSecret.name }}
    items: [{key: {{ .Values.redis.passwordSecret.key }}, path: password}]
{{- end }}
{{- if and (not .Values.redis.deploy) .Values.redis.addr .Values.redis.tls.enabled .Values.redis.tls.caSecret.name }}
- name: redis-ca
  secret:
    secretName: {{ .Values.redis.tls.caSecret.name }}
    items: [{key: {{ .Values.redis.tls.caSecret.key }}, path: ca.crt}]
{{- end }}
{{- end -}}

{{/* HTTPS on a proxy (embedded or fleet): README "HTTPS and certificates". */}}
{{- define "tenantroute.tlsArgs" -}}
{{- if .Values.tls.enabled }}
- --tls-bind-address=:9443
- --https-redirect-port={{ .Values.tls.redirectPort }}
{{- if .Values.tls.certificateSecrets }}
- --tls-cert-dir=/etc/tenantroute/certs
{{- end }}
{{- with .Values.tls.acme.ca }}
- --acme-ca={{ . }}
{{- end }}
{{- with .Values.tls.acme.email }}
- --acme-email={{ . }}
{{- end }}
{{- if .Values.tls.acme.caRootsSecret.name }}
- --acme-ca-roots=/etc/tenantroute/acme-roots/ca.crt
{{- end }}
{{- end }}
{{- end -}}

{{- define "tenantroute.tlsMounts" -}}
{{- if .Values.tls.enabled }}
{{- /* Volumes are named by position: a Secret's name may hold dots and run to 253
characters, a volume's is a DNS label of 63. */ -}}
{{- range $i, $secret := .Values.tls.certificateSecrets }}
- {name: cert-{{ $i }}, mountPath: /etc/tenantroute/certs/{{ $secret }}, readOnly: true}
{{- end }}
{{- if .Values.tls.acme.caRootsSecret.name }}
- {name: acme-roots, mountPath: /etc/tenantroute/acme-roots, readOnly: true}
{{- end }}
{{- end }}
{{- end -}}

{{- define "tenantroute.tlsVolumes" -}}
{{- if .Values.tls.enabled }}
{{- range $i, $secret := .Values.tls.certificateSecrets }}
- name: cert-{{ $i }}
  secret:
    secretName: {{ $secret }}
    items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}]
{{- end }}
{{- if .Values.tls.acme.caRootsSecret.name }}
- name: acme-roots
  secret:
    secretName: {{ .Values.tls.acme.caRootsSecret.name }}
    items: [{key: {{ .Values.tls.acme.caRootsSecret.key }}, path: ca.crt}]
{{- end }}
{{- end }}
{{- end -}}

{{/* The generated secrets (lookup token, HMAC key, Redis password), as YAML: the
values of the live Secrets when they exist (upgrades keep them), else random ones.
Computed once per rendering and kept in .Values, so that the Secrets and the pods'
checksum annotations see the same values. helm template and GitOps tools have no live
Secrets to read: they get new values on every rendering; give them
sharedSecret.existingSecret (or the values) instead. */}}
{{- define "tenantroute.generated" -}}
{{- if not (hasKey .Values "__generated") -}}
{{- $fullname := include "tenantroute.fullname" . -}}
{{- $shared := (lookup "v1" "Secret" .Release.Namespace (printf "%s-shared" $fullname)).data | default dict -}}
{{- $redis := (lookup "v1" "Secret" .Release.Namespace (printf "%s-redis" $fullname)).data | default dict -}}
{{- $g := dict
  "lookupToken" (.Values.sharedSecret.lookupToken | default (get $shared "lookup-token" | b64dec) | default (randAlphaNum 64))
  "redisHMACKey" (.Values.sharedSecret.redisHMACKey | default (get $shared "redis-hmac-key" | b64dec) | default (randAlphaNum 64)) -}}
{{- if .Values.redis.deploy -}}
{{- $_ := set $g "redisPassword" (get $redis "password" | b64dec | default (randAlphaNum 64)) -}}
{{- end -}}
{{- $_ := set .Values "__generated" $g -}}
{{- end -}}
{{- toYaml (get .Values "__generated") -}}
{{- end -}}

{{/* The checksum of the secrets the chart creates and the pods read at start: a
change restarts them. An existingSecret is the user's to roll out. */}}
{{- define "tenantroute.secretsChecksum" -}}
{{- $g := include "tenantroute.generated" . | fromYaml -}}
{{- if .Values.sharedSecret.existingSecret -}}
{{- $g = omit $g "lookupToken" "redisHMACKey" -}}
{{- end -}}
{{- toYaml $g | sha256sum -}}
{{- end -}}
