{{/*
An upstream etcd StatefulSet: (dict "root" $ "name" NAME "component" C
"replicas" N "memberName" "$(POD_NAME)" or a fixed name "clientURL" URL
"peerURL" URL "initialCluster" "..." "state" "new" "token" T "storage"
{size, storageClassName} "resources" {...}).
*/}}
{{- define "meridian.etcdStatefulSet" -}}
{{- $ := .root -}}
{{- $v := $.Values -}}
{{- $tls := $v.tls.enabled -}}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .name }}
  labels:
    {{- include "meridian.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  serviceName: {{ .name }}
  replicas: {{ .replicas }}
  # The members of a new cluster need each other to elect a leader.
  podManagementPolicy: Parallel
  selector:
    matchLabels:
      {{- include "meridian.selector" (list $ .component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "meridian.labels" $ | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
    spec:
      enableServiceLinks: false
      securityContext:
        {{- toYaml $v.podSecurityContext | nindent 8 }}
      {{- with $v.etcd.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- include "meridian.topologySpread" (list $ .component) | nindent 6 }}
      {{- with $v.etcd.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.etcd.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: etcd
          image: {{ $v.etcd.image.repository }}:{{ $v.etcd.image.tag }}
          imagePullPolicy: {{ $v.etcd.image.pullPolicy }}
          command: [/usr/local/bin/etcd]
          args:
            - --name={{ .memberName }}
            - --data-dir=/var/lib/etcd/data
            - --listen-client-urls={{ include "meridian.scheme" $ }}://0.0.0.0:{{ $v.listeners.etcd.client }}
            - --advertise-client-urls={{ .clientURL }}
            - --listen-peer-urls={{ include "meridian.scheme" $ }}://0.0.0.0:{{ $v.listeners.etcd.peer }}
            - --initial-advertise-peer-urls={{ .peerURL }}
            - --initial-cluster={{ .initialCluster }}
            - --initial-cluster-state={{ .state }}
            - --initial-cluster-token={{ .token }}
            # Plain http for the probes (/livez, /readyz) and /metrics,
            # whatever the clients' TLS.
            - --listen-metrics-urls=http://0.0.0.0:{{ $v.listeners.etcd.metrics }}
            {{- if $v.etcd.quotaBackendBytes }}
            - --quota-backend-bytes={{ int64 $v.etcd.quotaBackendBytes }}
            {{- end }}
            {{- if $tls }}
            - --cert-file=/etc/meridian-tls/tls.crt
            - --key-file=/etc/meridian-tls/tls.key
            - --trusted-ca-file=/etc/meridian-tls/ca.crt
            - --client-cert-auth=true
            - --peer-cert-file=/etc/meridian-tls/tls.crt
            - --peer-key-file=/etc/meridian-tls/tls.key
            - --peer-trusted-ca-file=/etc/meridian-tls/ca.crt
            - --peer-client-cert-auth=true
            {{- end }}
          env:
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
          ports:
            - {name: client, containerPort: {{ $v.listeners.etcd.client }}}
            - {name: peer, containerPort: {{ $v.listeners.etcd.peer }}}
            - {name: metrics, containerPort: {{ $v.listeners.etcd.metrics }}}
          startupProbe:
            httpGet: {path: /livez, port: metrics}
            periodSeconds: 5
            failureThreshold: 60
          livenessProbe:
            httpGet: {path: /livez, port: metrics}
            periodSeconds: 10
            failureThreshold: 3
            timeoutSeconds: 5
          readinessProbe:
            httpGet: {path: /readyz, port: metrics}
            periodSeconds: 5
            failureThreshold: 2
            timeoutSeconds: 5
          resources:
            {{- toYaml .resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.containerSecurityContext | nindent 12 }}
          volumeMounts:
            - name: data
              mountPath: /var/lib/etcd
            {{- if $tls }}
            - name: tls
              mountPath: /etc/meridian-tls
              readOnly: true
            {{- end }}
      {{- if $tls }}
      volumes:
        - name: tls
          secret:
            secretName: {{ $v.tls.existingSecret }}
      {{- end }}
  volumeClaimTemplates:
    - metadata:
        name: data
      spec:
        accessModes: [ReadWriteOnce]
        {{- with .storage.storageClassName }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ .storage.size }}
{{- end -}}
