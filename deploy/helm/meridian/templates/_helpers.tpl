{{/* Names. */}}
{{- define "meridian.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "meridian.labels" -}}
app.kubernetes.io/name: meridian
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
meridian.io/region: {{ .Values.region }}
{{- end -}}

{{/* Selector labels of one component: (list $ "broker"). */}}
{{- define "meridian.selector" -}}
app.kubernetes.io/name: meridian
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* A config key's environment variable: broker.admin_addr → MERIDIAN_BROKER_ADMIN_ADDR. */}}
{{- define "meridian.envName" -}}
{{- printf "MERIDIAN_%s" (. | upper | replace "." "_" | replace "-" "_") -}}
{{- end -}}

{{- define "meridian.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "meridian.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}

{{- define "meridian.ns" -}}
{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}

{{/* The region's etcd endpoints (metadata.endpoints), comma-separated. */}}
{{- define "meridian.etcdEndpoints" -}}
{{- if eq .Values.etcd.mode "external" -}}
{{- if not .Values.etcd.endpoints }}{{ fail "etcd.mode=external needs etcd.endpoints" }}{{ end -}}
{{- join "," .Values.etcd.endpoints -}}
{{- else if eq .Values.etcd.mode "managed" -}}
{{- $f := include "meridian.fullname" . -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $eps = append $eps (printf "%s://%s-etcd-%d.%s-etcd.%s:%v" (include "meridian.scheme" $) $f $i $f (include "meridian.ns" $) $.Values.listeners.etcd.client) -}}
{{- end -}}
{{- join "," $eps -}}
{{- else -}}
{{- fail (printf "etcd.mode %q: want managed or external" .Values.etcd.mode) -}}
{{- end -}}
{{- end -}}

{{/*
The ledger quorums, checked as the broker checks them at start.
*/}}
{{- define "meridian.checkQuorum" -}}
{{- $e := int .Values.quorum.ensemble -}}{{- $w := int .Values.quorum.write -}}{{- $a := int .Values.quorum.ack -}}
{{- if not (and (ge $e $w) (ge $w $a) (ge $a 1)) -}}
{{- fail (printf "quorum: want ensemble >= write >= ack >= 1, have E=%d Qw=%d Qa=%d" $e $w $a) -}}
{{- end -}}
{{- end -}}

{{/* Bookies in the release (zones: replicas per zone). */}}
{{- define "meridian.bookieCount" -}}
{{- if eq .Values.bookie.rack.from "zones" -}}
{{- mul (len .Values.bookie.rack.zones) (int .Values.bookie.replicas) -}}
{{- else -}}
{{- int .Values.bookie.replicas -}}
{{- end -}}
{{- end -}}

{{/*
The bookies' disruption budget: how many bookies may be down at once for a
voluntary disruption (a drain, a rolling update) while an ack quorum stays
writable.
  - Every write quorum keeps an ack quorum of live members: Qw - k >= Qa,
    so whichever k bookies are down, every entry can still reach Qa
    bookies of its write set.
  - The writer replaces a down member by an ensemble change, which blocks
    adds until it finds a live bookie outside the ensemble, and a new
    ledger needs E live bookies: bookies - k >= E.
So maxUnavailable = min(Qw - Qa, bookies - E); 0 would block every drain,
so rendering fails instead and says what to change.
Worked: 4 bookies, E=3, Qw=3, Qa=2 -> min(1, 1) = 1.
*/}}
{{- define "meridian.bookieMaxUnavailable" -}}
{{- $n := int (include "meridian.bookieCount" .) -}}
{{- $k := min (sub (int .Values.quorum.write) (int .Values.quorum.ack)) (sub $n (int .Values.quorum.ensemble)) -}}
{{- if lt $k 1 -}}
{{- fail (printf "bookie disruption budget: with %d bookies, E=%v, Qw=%v, Qa=%v no bookie can be down while an ack quorum stays writable (maxUnavailable = min(Qw-Qa, bookies-E) = %d): it needs Qw > Qa and more bookies than E" $n .Values.quorum.ensemble .Values.quorum.write .Values.quorum.ack $k) -}}
{{- end -}}
{{- $k -}}
{{- end -}}

{{/* Env of every Meridian container: the pod's name and namespace, the config file. */}}
{{- define "meridian.podEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end -}}

{{/* Volumes every Meridian pod mounts: the config, /tmp, the secrets. */}}
{{- define "meridian.volumes" -}}
- name: config
  configMap:
    name: {{ include "meridian.fullname" . }}-config
- name: tmp
  emptyDir: {}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ required "tls.enabled needs tls.existingSecret" .Values.tls.existingSecret }}
{{- end }}
{{- if .Values.gossip.existingSecret }}
- name: gossip
  secret:
    secretName: {{ .Values.gossip.existingSecret }}
{{- end }}
{{- end -}}

{{- define "meridian.volumeMounts" -}}
- name: config
  mountPath: /etc/meridian
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/meridian-tls
  readOnly: true
{{- end }}
{{- if .Values.gossip.existingSecret }}
- name: gossip
  mountPath: /etc/meridian-gossip
  readOnly: true
{{- end }}
{{- end -}}

{{/* httpGet probes of a Meridian role on its http port. */}}
{{- define "meridian.probes" -}}
{{- $p := .Values.probes -}}
startupProbe:
  httpGet: {path: /healthz, port: http, scheme: {{ include "meridian.scheme" . | upper }}}
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
  timeoutSeconds: {{ $p.startup.timeoutSeconds }}
livenessProbe:
  httpGet: {path: /healthz, port: http, scheme: {{ include "meridian.scheme" . | upper }}}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
readinessProbe:
  httpGet: {path: /readyz, port: http, scheme: {{ include "meridian.scheme" . | upper }}}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
{{- end -}}

{{/* Listener env and container ports of a role: (list $ "broker"). */}}
{{- define "meridian.listenerEnv" -}}
{{- $ := index . 0 -}}{{- $role := index . 1 -}}
{{- range $name, $l := index $.Values.listeners $role -}}
- name: {{ include "meridian.envName" $l.listenKey }}
  value: "0.0.0.0:{{ $l.port }}"
{{ end -}}
{{- end -}}

{{- define "meridian.containerPorts" -}}
{{- $ := index . 0 -}}{{- $role := index . 1 -}}
{{- range $name, $l := index $.Values.listeners $role -}}
- name: {{ $name }}
  containerPort: {{ $l.port }}
  protocol: TCP
{{ if eq $name "gossip" -}}
- name: gossip-udp
  containerPort: {{ $l.port }}
  protocol: UDP
{{ end -}}
{{ end -}}
{{- end -}}

{{/* Gossip seeds: this region's brokers, then gossip.extraSeeds. */}}
{{- define "meridian.gossipSeeds" -}}
{{- $f := include "meridian.fullname" . -}}
{{- $s := list -}}
{{- range $i := until (int .Values.broker.replicas) -}}
{{- $s = append $s (printf "%s-broker-%d.%s-broker.%s:%v" $f $i $f (include "meridian.ns" $) $.Values.listeners.broker.gossip.port) -}}
{{- end -}}
{{- join "," (concat $s .Values.gossip.extraSeeds) -}}
{{- end -}}

{{- define "meridian.topologySpread" -}}
{{- $ := index . 0 -}}{{- $component := index . 1 -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "meridian.selector" (list $ $component) | nindent 8 }}
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "meridian.selector" (list $ $component) | nindent 8 }}
{{- end -}}
