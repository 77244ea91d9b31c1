{{/*
Names and labels shared by every template.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "tessera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's base name for its objects: fullnameOverride, else the release name when it
already contains the chart name, else "<release>-<chart>". At most 52 characters, so that
"-controller" style suffixes stay within 63.
*/}}
{{- define "tessera.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tessera.controllerName" -}}
{{- printf "%s-controller" (include "tessera.fullname" .) }}
{{- end }}

{{- define "tessera.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object of the release. */}}
{{- define "tessera.labels" -}}
helm.sh/chart: {{ include "tessera.chart" . }}
app.kubernetes.io/name: {{ include "tessera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tessera
{{- end }}

{{/* Selector of the controller's pods (immutable once installed: keep it small). */}}
{{- define "tessera.controllerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "tessera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "tessera.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tessera.controllerName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The controller image: repository:tag, or repository@digest when a digest is set. */}}
{{- define "tessera.controllerImage" -}}
{{- $img := .Values.controller.image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) }}
{{- end }}
{{- end }}

{{/* Labels of a ServiceMonitor or PodMonitor: `release` (what the Prometheus Operator's
selector usually matches) when set, plus the user's labels. Argument: the monitor's values. */}}
{{- define "tessera.monitorLabels" -}}
{{- if .release }}
release: {{ .release | quote }}
{{- end }}
{{- with .labels }}
{{ toYaml . }}
{{- end }}
{{- end }}
