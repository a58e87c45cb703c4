{{/* The name of the objects: the release name when it contains the chart's
name (release "fabric-exporter": "fabric-exporter", as in the kustomize
base), else RELEASE-fabric-exporter. */}}
{{- define "fabric-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fabric-exporter.fullname" -}}
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

{{/* Selector labels: the kustomize base's. No app.kubernetes.io/instance
here: with hostNetwork and port 10470 one release per cluster is all there
can be, and the selectors stay those of the base. */}}
{{- define "fabric-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fabric-exporter.name" . }}
{{- end }}

{{/* The labels every object and the pods of the base carry. */}}
{{- define "fabric-exporter.labels" -}}
{{ include "fabric-exporter.selectorLabels" . }}
app.kubernetes.io/component: exporter
{{- end }}

{{/* Labels only Helm adds, on the objects' own metadata (not on the pods,
so that a chart upgrade alone does not restart them). */}}
{{- define "fabric-exporter.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The ACS reader (pcieACSReader): `fabric_exporter dump-acs` as uid 0 with
CAP_SYS_ADMIN and the binary's two file capabilities, the host's /sys
read-only, writing the ACS file on the volume run; once (an init
container) or every interval (a sidecar). components/pcie-acs-reader and
pcie-acs-refresh of the kustomize base.
*/}}
{{- define "fabric-exporter.acsReader" -}}
- name: {{ .name }}
  image: {{ .image | quote }}
  {{- with .pullPolicy }}
  imagePullPolicy: {{ . }}
  {{- end }}
  args:
  - dump-acs
  - --output=/run/fabric-exporter/pcie-acs
  {{- with .interval }}
  - {{ printf "--interval=%s" . | quote }}
  {{- end }}
  {{- with .resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsUser: 0
    runAsNonRoot: false
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    privileged: false
    capabilities:
      drop:
      - ALL
      # SYS_ADMIN: the bridges' extended configuration space; SYS_PTRACE and
      # DAC_READ_SEARCH: the image's binary carries them as file capabilities.
      add:
      - SYS_ADMIN
      - SYS_PTRACE
      - DAC_READ_SEARCH
  volumeMounts:
  - name: sys
    mountPath: /host/sys
    readOnly: true
  - name: run
    mountPath: /run/fabric-exporter
{{- end }}
