{{/*
The name in object names and labels: `jobset`, upstream's, so that with the release name `jobset`
object names are config/'s (and upstream's kustomize manifests').
*/}}
{{- define "jobset.name" -}}
{{- default "jobset" .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of object names: the release name, with the name appended unless it contains it.
*/}}
{{- define "jobset.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "jobset.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The chart label's value.
*/}}
{{- define "jobset.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "jobset.labels" -}}
helm.sh/chart: {{ include "jobset.chart" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{ include "jobset.selectorLabels" . }}
{{- end }}

{{/*
Labels naming the release.
*/}}
{{- define "jobset.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jobset.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels selecting the manager's pods.
*/}}
{{- define "jobset.controller.selectorLabels" -}}
{{ include "jobset.selectorLabels" . }}
control-plane: controller-manager
{{- end }}

{{/*
Labels of the manager's Deployment, pods and metrics Service.
*/}}
{{- define "jobset.controller.labels" -}}
{{ include "jobset.labels" . }}
control-plane: controller-manager
{{- end }}

{{/*
The manager's ServiceAccount (and Deployment).
*/}}
{{- define "jobset.controller.name" -}}
{{ include "jobset.fullname" . }}-controller-manager
{{- end }}

{{/*
The manager's configuration ConfigMap.
*/}}
{{- define "jobset.controller.configMap.name" -}}
{{ include "jobset.fullname" . }}-manager-config
{{- end }}

{{/*
The webhook Service, whose name the serving certificate carries.
*/}}
{{- define "jobset.webhook.service.name" -}}
{{ include "jobset.fullname" . }}-webhook-service
{{- end }}

{{/*
The webhook serving certificate's Secret.
*/}}
{{- define "jobset.webhook.secret.name" -}}
{{ include "jobset.fullname" . }}-webhook-server-cert
{{- end }}

{{/*
cert-manager's Certificate of the webhook Service.
*/}}
{{- define "jobset.certManager.certificate.name" -}}
{{ include "jobset.fullname" . }}-serving-cert
{{- end }}

{{/*
cert-manager's self-signed Issuer, when certManager.issuerRef is empty.
*/}}
{{- define "jobset.certManager.issuer.name" -}}
{{ include "jobset.fullname" . }}-selfsigned-issuer
{{- end }}
