{{/* Chart name, overridable. */}}
{{- define "oooi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every resource name: <release>-oooi, or the release name when it already says oooi. */}}
{{- define "oooi.fullname" -}}
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

{{/* Name of the controller's objects (Deployment, Service, roles). */}}
{{- define "oooi.controllerName" -}}
{{- printf "%s-controller" (include "oooi.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object of the chart. */}}
{{- define "oooi.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "oooi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: oooi
{{- end }}

{{/* Selector of the controller pods. Component "controller" keeps them apart
from the dhcp/dns/proxy pods the controller creates, which carry
app.kubernetes.io/name=oooi too. */}}
{{- define "oooi.selectorLabels" -}}
app.kubernetes.io/name: {{ include "oooi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "oooi.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "oooi.controllerName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "oooi.filterConfigMapName" -}}
{{- .Values.filter.configMapName }}
{{- end }}

{{/* The reference of one oooi image: `include "oooi.imageRef" (list $ "dns")`
gives <registry>/<repository>:<tag>[@<digest>]. The registry is the image's
own or images.registry; one of them is required, since oooi publishes no
images a cluster could pull by default. */}}
{{- define "oooi.imageRef" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $img := index $root.Values.images $name }}
{{- $registry := default $root.Values.images.registry $img.registry }}
{{- if not $registry }}
{{- fail (printf "images.registry (or images.%s.registry) is required: oooi publishes no images; build them with `tools/dev images --save DIR`, push them to a registry your cluster pulls from, and set images.registry to it (docs/installation.md)" $name) }}
{{- end }}
{{- $ref := printf "%s/%s:%s" (trimSuffix "/" $registry) $img.repository (default $root.Chart.AppVersion $img.tag) }}
{{- if $img.digest }}
{{- $ref = printf "%s@%s" $ref $img.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/* The filter module's bytes, failing the render with a clear message when the
file is missing or too large. */}}
{{- define "oooi.filterModule" -}}
{{- $wasm := .Files.Get .Values.filter.file }}
{{- if not $wasm }}
{{- fail (printf "the filter module %s is missing from the chart: install the packaged chart that `tools/dev package` writes (it builds the module for wasm32-wasip1 and puts it in), not the chart folder" .Values.filter.file) }}
{{- end }}
{{- if gt (len $wasm) (int .Values.filter.maxBytes) }}
{{- fail (printf "the filter module %s is %d bytes, over filter.maxBytes (%d)" .Values.filter.file (len $wasm) (int .Values.filter.maxBytes)) }}
{{- end }}
{{- $wasm }}
{{- end }}

{{/* "true" on OpenShift, else empty: the cluster serves
security.openshift.io/v1 (the chart then needs no flag), or
controller.openshiftSCC forces it (a render without the cluster's APIs,
`helm template` without `--api-versions security.openshift.io/v1`). */}}
{{- define "oooi.openshift" -}}
{{- if or .Values.controller.openshiftSCC (.Capabilities.APIVersions.Has "security.openshift.io/v1") }}true{{ end }}
{{- end }}

{{/*
A label map as `key=value,key=value` (sorted by key), the form the
controller's label flags take.
*/}}
{{- define "oooi.labelList" -}}
{{- $parts := list -}}
{{- range $k, $v := . -}}
{{- $parts = append $parts (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}
