{{/* Object names: `<release>-kondor`, unless the release is already named kondor. */}}
{{- define "kondor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kondor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kondor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kondor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kondor
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: pass (dict "ctx" $ "component" "operator"). */}}
{{- define "kondor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kondor.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kondor.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "kondor.operatorName" -}}
{{- printf "%s-operator" (include "kondor.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kondor.agentName" -}}
{{- printf "%s-agent" (include "kondor.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kondor.webhookName" -}}
{{- printf "%s-webhook" (include "kondor.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kondor.operatorServiceAccount" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "kondor.operatorName" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kondor.agentServiceAccount" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (include "kondor.agentName" .) .Values.agent.serviceAccount.name }}
{{- else }}
{{- required "agent.serviceAccount.name is required when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the webhook server's certificate. */}}
{{- define "kondor.webhookSecret" -}}
{{- default (printf "%s-tls" (include "kondor.webhookName" .)) .Values.webhook.tls.secretName }}
{{- end }}

{{/* The owner-setting webhooks' matchConditions: not called
for an object whose spec.owner names someone else than a requester who may not act for others
(templates/admission-policies.yaml refuses it). */}}
{{- define "kondor.ownerWebhookMatch" -}}
matchConditions:
  - name: not-refused-by-the-owner-policy
    expression: >-
      !has(object.spec) || !has(object.spec.owner) || object.spec.owner == request.userInfo.username
      || request.userInfo.username in ['system:kube-controller-manager',
      'system:serviceaccount:{{ .Release.Namespace }}:{{ include "kondor.operatorServiceAccount" . }}']
      || request.userInfo.groups.exists(g, g in ['system:masters',
      'system:serviceaccounts:kube-system'])
{{- end }}
