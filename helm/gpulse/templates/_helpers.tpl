{{/* Names: DNS labels of at most 63 characters. */}}
{{- define "gpulse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpulse.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The namespace of every namespaced object. */}}
{{- define "gpulse.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A name with a suffix, still within 63 characters. Call with (list $ "suffix"). */}}
{{- define "gpulse.suffixed" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- printf "%s-%s" (include "gpulse.fullname" $root | trunc (int (sub 62 (len $suffix)))) $suffix | trimSuffix "-" -}}
{{- end -}}

{{- define "gpulse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpulse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpulse.labels" -}}
{{ include "gpulse.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpulse
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* [registry/]repository(@digest|:tag); global.imageRegistry wins over image.registry. */}}
{{- define "gpulse.image" -}}
{{- $registry := (.Values.global | default dict).imageRegistry | default .Values.image.registry | trimSuffix "/" -}}
{{- $repo := ternary (printf "%s/%s" $registry .Values.image.repository) .Values.image.repository (ne $registry "") -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
attribution.enabled as "auto", "true" or "" (off). auto leaves gpulse's own
default (kube.enabled auto: on where the socket exists); true insists.
*/}}
{{- define "gpulse.attribution" -}}
{{- $e := .Values.attribution.enabled -}}
{{- if eq (toString $e) "auto" -}}auto{{- else if $e -}}true{{- end -}}
{{- end -}}

{{/*
The runbook prefix the rules and dashboards of this repository carry; the
templates swap it for .Values.runbookBaseUrl (tests/integration/helm/test_helm_values.py keeps it
equal to that value's default and to every runbook link in the files).
Call with (list $ text).
*/}}
{{- define "gpulse.runbooks" -}}
{{- $root := index . 0 -}}
{{- index . 1 | replace "https://github.com/gpulse/gpulse/blob/main/docs/runbooks" ($root.Values.runbookBaseUrl | trimSuffix "/") -}}
{{- end -}}

{{/* Attribution reads the Kubernetes API: the only case that needs a token and RBAC. */}}
{{- define "gpulse.needsKubeApi" -}}
{{- if and (include "gpulse.attribution" .) .Values.attribution.kubeApi -}}true{{- end -}}
{{- end -}}

{{- define "gpulse.createServiceAccount" -}}
{{- if and (include "gpulse.needsKubeApi" .) .Values.serviceAccount.create -}}true{{- end -}}
{{- end -}}

{{- define "gpulse.serviceAccountName" -}}
{{- if include "gpulse.createServiceAccount" . -}}
{{- default (include "gpulse.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Web config: inline (a Secret the chart writes) or an existing Secret. */}}
{{- define "gpulse.webConfigSecret" -}}
{{- if .Values.webConfig.existingSecret -}}
{{- .Values.webConfig.existingSecret -}}
{{- else if .Values.webConfig.config -}}
{{- include "gpulse.suffixed" (list . "web-config") -}}
{{- end -}}
{{- end -}}

{{- define "gpulse.tls" -}}
{{- if or .Values.webConfig.tls (and (not .Values.webConfig.existingSecret) (hasKey .Values.webConfig.config "tls_server_config")) -}}true{{- end -}}
{{- end -}}

{{- define "gpulse.scrapeScheme" -}}
{{- $monitor := index . 1 -}}
{{- $monitor.scheme | default (ternary "https" "http" (eq (include "gpulse.tls" (index . 0)) "true")) -}}
{{- end -}}

{{/*
The Prometheus Operator kinds render only when the cluster serves them (or the
user forces it), so a plain cluster can install the chart with its defaults.
Call with (list $ "ServiceMonitor" force).
*/}}
{{- define "gpulse.operatorApi" -}}
{{- $root := index . 0 -}}
{{- $kind := index . 1 -}}
{{- if or (index . 2) ($root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind)) ($root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}true{{- end -}}
{{- end -}}

{{/*
gpulse flags from .Values.config: one level of sections, like the YAML config
file. `sample_interval` -> --sample-interval; `kube.copy_labels` ->
--kube.copy-labels. Booleans are switches (--x / --no-x, as `gpulse serve`
takes them); lists join with commas; whole numbers print without an exponent
(YAML numbers arrive as float64).
*/}}
{{- define "gpulse.flag" -}}
{{- $name := index . 0 -}}
{{- $v := index . 1 -}}
{{- if kindIs "bool" $v -}}
{{- printf "--%s%s" (ternary "" "no-" $v) $name -}}
{{- else if kindIs "slice" $v -}}
{{- printf "--%s=%s" $name (join "," $v) -}}
{{- else if and (kindIs "float64" $v) (eq (floor $v) $v) -}}
{{- printf "--%s=%d" $name (int64 $v) -}}
{{- else -}}
{{- printf "--%s=%v" $name $v -}}
{{- end -}}
{{- end -}}

{{- define "gpulse.configArgs" -}}
{{- range $key, $value := .Values.config }}
{{- if kindIs "map" $value }}
{{- range $sub, $v := $value }}
- {{ include "gpulse.flag" (list (printf "%s.%s" $key ($sub | replace "_" "-")) $v) | quote }}
{{- end }}
{{- else }}
- {{ include "gpulse.flag" (list ($key | replace "_" "-") $value) | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The scrape settings ServiceMonitor endpoints and PodMonitor endpoints share.
The chart's relabeling puts `node` on every target, so `up` and the exporter's
own series name the node like the GPU series do.
Call with (list $ .Values.serviceMonitor).
*/}}
{{- define "gpulse.scrapeEndpoint" -}}
{{- $m := index . 1 -}}
scheme: {{ include "gpulse.scrapeScheme" . }}
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
honorLabels: {{ $m.honorLabels }}
relabelings:
  - action: replace
    sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
