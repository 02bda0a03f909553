{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "sa.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name; the release name alone when it already contains the chart name. */}}
{{- define "sa.fullname" -}}
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

{{- define "sa.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sa.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sa.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sa.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "sa.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sa.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* certManager or selfManaged; `auto` picks cert-manager when the cluster serves its API. */}}
{{- define "sa.certMode" -}}
{{- $mode := .Values.certs.mode -}}
{{- if eq $mode "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}certManager{{- else -}}selfManaged{{- end -}}
{{- else if or (eq $mode "certManager") (eq $mode "selfManaged") -}}
{{- $mode -}}
{{- else -}}
{{- fail (printf "certs.mode must be auto, certManager or selfManaged, not %q" $mode) -}}
{{- end -}}
{{- end -}}

{{- define "sa.tlsSecretName" -}}
{{- if eq (include "sa.certMode" .) "certManager" -}}
{{- printf "%s-tls" (include "sa.fullname" .) -}}
{{- else -}}
{{- default (printf "%s-certs" (include "sa.fullname" .)) .Values.certs.selfManaged.secretName -}}
{{- end -}}
{{- end -}}

{{- define "sa.leaseName" -}}
{{- default (printf "%s-leader" (include "sa.fullname" .)) .Values.controller.leaderElection.leaseName -}}
{{- end -}}

{{/* "true" when matchConditions are rendered: admissionregistration.k8s.io matchConditions are
beta and on by default from 1.28, GA in 1.30. */}}
{{- define "sa.matchConditions" -}}
{{- $mode := .Values.webhook.matchConditions -}}
{{- if eq $mode "always" -}}true
{{- else if eq $mode "never" -}}false
{{- else if eq $mode "auto" -}}{{ semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version }}
{{- else -}}{{ fail (printf "webhook.matchConditions must be auto, always or never, not %q" $mode) }}
{{- end -}}
{{- end -}}

{{/* Shared by both webhooks: never kube-system, never the release namespace (the webhook must
not gate its own recovery), never namespaces that opted out. */}}
{{- define "sa.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range (concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces | uniq) }}
        - {{ . | quote }}
        {{- end }}
    - key: stateful-admission.io/ignore
      operator: NotIn
      values: ["true"]
    {{- with .Values.webhook.namespaceSelectorExpressions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/* CEL comparing one scalar field of object and oldObject as a tagged string ('' when absent,
's…' for a string, 'n…' for a number), so that an int-or-string such as maxUnavailable compares
without a type error (an evaluation error lets failurePolicy decide, and with Ignore that skips
the webhook) and 1 still differs from "1". */}}
{{- define "sa.celScalarDiffers" -}}
{{- $parts := splitList "." . -}}
{{- $out := list -}}
{{- range $obj := list "object" "oldObject" -}}
{{- $checks := list -}}
{{- $prefix := $obj -}}
{{- range $parts -}}
{{- $checks = append $checks (printf "has(%s.%s)" $prefix .) -}}
{{- $prefix = printf "%s.%s" $prefix . -}}
{{- end -}}
{{- $out = append $out (printf "(%s ? (type(%s) == string ? 's' + %s : 'n' + string(%s)) : '')" (join " && " $checks) $prefix $prefix $prefix) -}}
{{- end -}}
{{- join " != " $out -}}
{{- end -}}

{{/* A StatefulSet UPDATE reaches the webhooks only when something the rules read differs:
volumeClaimTemplates, maxUnavailable, partition and the update strategy type, replicas (the
maxUnavailable checks compare against them) or any stateful-admission.io/ annotation. Every
other request (CREATEs, PVCs) passes. Fields are compared as written, so a change that is
semantically empty still passes: false positives cost a call, false negatives would skip a rule.
Map iteration order may differ between the two annotation lists; that too only errs towards
calling the webhook. */}}
{{- define "sa.matchConditionsBlock" -}}
matchConditions:
  - name: statefulset-update-touches-handled-fields
    expression: >-
      request.resource.resource != 'statefulsets' || request.operation != 'UPDATE' ||
      !has(object.spec) || !has(oldObject.spec) ||
      (has(object.spec.updateStrategy) && has(object.spec.updateStrategy.type) &&
      object.spec.updateStrategy.type == 'RollingUpdate' && !has(object.spec.updateStrategy.rollingUpdate) &&
      has(object.metadata.annotations) && 'stateful-admission.io/max-unavailable' in object.metadata.annotations) ||
      (has(object.spec.volumeClaimTemplates) ? object.spec.volumeClaimTemplates : []) !=
      (has(oldObject.spec.volumeClaimTemplates) ? oldObject.spec.volumeClaimTemplates : []) ||
      {{- range list "spec.replicas" "spec.updateStrategy.type" "spec.updateStrategy.rollingUpdate.partition" "spec.updateStrategy.rollingUpdate.maxUnavailable" }}
      {{ include "sa.celScalarDiffers" . }} ||
      {{- end }}
      (has(object.metadata.annotations) ? object.metadata.annotations.filter(k, k.startsWith('stateful-admission.io/')).map(k, k + '=' + object.metadata.annotations[k]) : []) !=
      (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations.filter(k, k.startsWith('stateful-admission.io/')).map(k, k + '=' + oldObject.metadata.annotations[k]) : [])
{{- end -}}

{{- define "sa.webhookTimeout" -}}
{{- $t := int .Values.webhook.timeoutSeconds -}}
{{- if or (lt $t 1) (gt $t 10) -}}
{{- fail (printf "webhook.timeoutSeconds must be between 1 and 10, not %d" $t) -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{/* The Service the ServiceMonitor scrapes, and so the `job` label of the series. The full
name is cut first so that the suffix always stays (a cut suffix would name the webhook's own
Service). */}}
{{- define "sa.metricsServiceName" -}}
{{- printf "%s-metrics" (include "sa.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{/* PromQL label matchers selecting this release's series in the alerts. */}}
{{- define "sa.metricsSelector" -}}
{{- default (printf "job=%q,namespace=%q" (include "sa.metricsServiceName" .) .Release.Namespace) .Values.monitoring.prometheusRule.selector -}}
{{- end -}}
