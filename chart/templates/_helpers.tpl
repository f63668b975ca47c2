{{/* The release's full name, used for every object this chart creates. */}}
{{- define "skyhook.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "skyhook.serviceAccountName" -}}
{{- default (include "skyhook.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Labels that select the operator pod; never change them after a release (immutable selector). */}}
{{- define "skyhook.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "skyhook.labels" -}}
{{ include "skyhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: skyhook-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* repository:tag, or repository:tag@digest when a digest is set. */}}
{{- define "skyhook.imageRef" -}}
{{- $ref := printf "%s:%s" .repository .tag -}}
{{- if .digest -}}{{- $ref = printf "%s@%s" $ref .digest -}}{{- end -}}
{{- $ref -}}
{{- end -}}

{{- define "skyhook.operatorImage" -}}
{{- $image := .Values.operator.image -}}
{{- include "skyhook.imageRef" (dict "repository" $image.repository "tag" (default (printf "v%s" .Chart.AppVersion) $image.tag) "digest" $image.digest) -}}
{{- end -}}

{{- define "skyhook.agentImage" -}}
{{- include "skyhook.imageRef" .Values.agent.image -}}
{{- end -}}

{{/* Where the operator reads tls.crt and tls.key (SKYHOOK_WEBHOOK_CERT_DIR). */}}
{{- define "skyhook.webhookCertDir" -}}
/tmp/k8s-webhook-server/serving-certs
{{- end -}}

{{/* The clientConfig of one webhook: the chart's Service at `path`. No caBundle: the
operator (certificates: operator) or cert-manager's CA injector writes it, and leaving it out
keeps `helm upgrade` from clearing it. */}}
{{- define "skyhook.webhookClient" -}}
clientConfig:
  service:
    name: {{ .root.Values.webhook.serviceName }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
{{- end -}}

{{/*
The scheme /metrics is served with, also the name of its port: https (secure, the default) or http.
*/}}
{{- define "skyhook.metricsScheme" -}}
{{- if .Values.metrics.secure }}https{{ else }}http{{ end }}
{{- end }}

{{/* "true" when Prometheus checks the metrics certificate against the serving CA (the
webhook Secret's), so the operator serves /metrics with the webhook's certificate. */}}
{{- define "skyhook.metricsVerified" -}}
{{- and .Values.metrics.secure .Values.metrics.serviceMonitor.enabled (not .Values.metrics.serviceMonitor.insecureSkipVerify) -}}
{{- end }}

{{/* The runtime-required taint: the value, or the spoken API group's default. */}}
{{- define "skyhook.runtimeRequiredTaint" -}}
{{- .Values.runtimeRequiredTaint | default (printf "%s=runtime-required:NoSchedule" .Values.apiGroup) -}}
{{- end }}

{{/* Non-empty when the operator makes the webhook certificate itself (webhooks on,
certificates: operator): only then does it read its Secret and the webhook configurations. */}}
{{- define "skyhook.operatorCertificates" -}}
{{- if and .Values.webhook.enable (eq .Values.webhook.certificates "operator") }}true{{ end -}}
{{- end -}}
