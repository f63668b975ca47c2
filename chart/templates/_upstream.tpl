{{- /*
Upstream Skyhook's chart lays its values out differently (controllerManager.*, metricsService,
...). Rather than guess, every upstream key a values file sets is refused, named with the key
that means the same here, or with why this chart has none. validations.yaml reports these
lines with the other bad values.
*/ -}}

{{- /* Upstream key, or a prefix of keys, -> this chart's key (the rest of a longer upstream
path appended), a description of where it went, or "none: <why>". */ -}}
{{- define "skyhook.upstreamKeys" -}}
controllerManager: "operator.* (chart/README.md lists them)"
controllerManager.replicas: operator.replicas
controllerManager.tolerations: operator.tolerations
controllerManager.selectors: operator.nodeSelector
controllerManager.nodeAffinity: "operator.nodeAffinity (a whole nodeAffinity: matchExpressions go in requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms)"
controllerManager.podDisruptionBudget: operator.podDisruptionBudget
controllerManager.podDisruptionBudget.minAvailable: "operator.podDisruptionBudget.maxUnavailable (at most this many operator pods down)"
controllerManager.serviceAccount: serviceAccount
controllerManager.kubeRbacProxy: "none: the operator serves /metrics over HTTPS itself, with the same token checks (metrics.secure)"
controllerManager.manager: "operator.* (chart/README.md lists them)"
controllerManager.manager.containerSecurityContext: operator.securityContext
controllerManager.manager.resources: operator.resources
controllerManager.manager.image: operator.image
controllerManager.manager.agent: agent.image
controllerManager.manager.env: "operator.extraEnv (any other SKYHOOK_<SETTING>)"
controllerManager.manager.env.copyDirRoot: copyDirRoot
controllerManager.manager.env.agentLogRoot: agentLogRoot
controllerManager.manager.env.leaderElection: "operator.leaderElection (true or false)"
controllerManager.manager.env.logLevel: operator.logLevel
controllerManager.manager.env.metricsPort: "metrics.port (a port number)"
controllerManager.manager.env.probePort: "operator.probePort (a port number)"
controllerManager.manager.env.reapplyOnReboot: "reapplyOnReboot (true or false)"
controllerManager.manager.env.runtimeRequiredTaint: runtimeRequiredTaint
controllerManager.manager.env.pauseImage: pauseImage
controllerManager.manager.env.legacyCleanupDelay: legacyCleanupDelay
controllerManager.manager.env.publishLegacyMetrics: "metrics.publishLegacy (true or false)"
controllerManager.manager.env.jobTtlSucceeded: operator.tuning.podTtlSucceeded
controllerManager.manager.env.jobTtlFailed: operator.tuning.podTtlFailed
controllerManager.manager.env.jobStageTimeout: operator.tuning.stageTimeout
controllerManager.manager.env.jobBackoffLimit: operator.tuning.stageRetries
kubernetesClusterDomain: "none: the webhook certificate names the Service <name>.<namespace>.svc and .svc.cluster.local"
metricsService: "metrics.port and metrics.service.enabled"
webhookService: "webhook.port (the Service listens on 443)"
imagePullSecret: "imagePullSecrets (the operator pod) and packagePullSecret (stage pods)"
useHostNetwork: "none: the operator needs no host network"
estimatedPackageCount: "operator.resources (requests and limits, set directly)"
estimatedNodeCount: "operator.resources (requests and limits, set directly)"
selectorMigration: "none: this chart's Deployment selector has never changed"
rbac.createSkyhookViewerRole: rbac.createViewerRole
rbac.createSkyhookEditorRole: rbac.createEditorRole
webhook.removalImage: "cleanup.image (one image reference)"
webhook.removalTag: "cleanup.image (one image reference)"
webhook.removalDigest: "cleanup.image (one image reference)"
{{- end -}}

{{- /* Dotted paths of the leaves under (dict "path" P "value" V); an empty map is a leaf. */ -}}
{{- define "skyhook.leafPaths" -}}
{{- if and (kindIs "map" .value) (gt (len .value) 0) -}}
{{- range $key, $child := .value }}
{{ include "skyhook.leafPaths" (dict "path" (printf "%s.%s" $.path $key) "value" $child) }}
{{- end -}}
{{- else -}}
{{ .path }}
{{- end -}}
{{- end -}}

{{- /* One line per upstream key set in .Values; empty when there is none. */ -}}
{{- define "skyhook.upstreamValueErrors" -}}
{{- $keys := include "skyhook.upstreamKeys" . | fromYaml -}}
{{- $paths := list -}}
{{- range $key := keys $keys | sortAlpha -}}
  {{- $parts := splitList "." $key -}}
  {{- $parent := $.Values -}}
  {{- range $part := initial $parts -}}
    {{- $parent = kindIs "map" $parent | ternary (get (kindIs "map" $parent | ternary $parent dict) $part) dict -}}
  {{- end -}}
  {{- if and (kindIs "map" $parent) (hasKey $parent (last $parts)) (or (eq (len $parts) 1) (not (hasPrefix "controllerManager." $key))) -}}
    {{- range $path := include "skyhook.leafPaths" (dict "path" $key "value" (get $parent (last $parts))) | splitList "\n" -}}
      {{- if $path -}}{{- $paths = append $paths $path -}}{{- end -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- range $path := $paths | uniq | sortAlpha -}}
  {{- $match := "" -}}
  {{- range $key := keys $keys -}}
    {{- if and (or (eq $path $key) (hasPrefix (printf "%s." $key) $path)) (gt (len $key) (len $match)) -}}
      {{- $match = $key -}}
    {{- end -}}
  {{- end -}}
  {{- $here := get $keys $match -}}
  {{- if hasPrefix "none: " $here }}
{{ $path }}: upstream Skyhook's value, not used here ({{ trimPrefix "none: " $here }})
  {{- else if contains " " $here }}
{{ $path }}: upstream Skyhook's name; here it is {{ $here }}
  {{- else }}
{{ $path }}: upstream Skyhook's name; here it is {{ $here }}{{ trimPrefix $match $path }}
  {{- end -}}
{{- end -}}
{{- end -}}
