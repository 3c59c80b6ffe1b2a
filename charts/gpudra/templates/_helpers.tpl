{{/*
The image of both components (and of the ComputeDomain IMEX daemons): repository:tag, the chart's appVersion when
the tag is empty.
*/}}
{{- define "gpudra.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
The labels every object of the chart carries.
*/}}
{{- define "gpudra.partOf" -}}
app.kubernetes.io/part-of: gpudra
{{- end -}}

{{/*
env entries from a map (dict "env" MAP): NAME: value, in the map's (sorted) order, every value a string.
*/}}
{{- define "gpudra.envFrom" -}}
{{- range $name, $value := .env }}
- name: {{ $name }}
  value: {{ toString $value | quote }}
{{- end }}
{{- end -}}

{{/*
What both workloads share in their container's env: the API server's address where the values set it, the
driver name and log settings where they differ from gpudra's defaults.
*/}}
{{- define "gpudra.commonEnv" -}}
{{- with .Values.kubernetesServiceHost }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ toString . | quote }}
{{- end }}
{{- with .Values.kubernetesServicePort }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ toString . | quote }}
{{- end }}
{{- if ne .Values.driverName "gpu.nvidia.com" }}
- name: GPUDRA_DRIVER_NAME
  value: {{ .Values.driverName | quote }}
{{- end }}
{{- if ne .Values.logLevel "INFO" }}
- name: GPUDRA_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end }}
{{- end -}}

{{/*
The pod-level scheduling and metadata values of one component (dict "v" COMPONENT "root" $).
*/}}
{{- define "gpudra.podScheduling" -}}
{{- with .v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The API server's address for the IMEX daemon pods, as JSON env (empty when the values do not set it).
*/}}
{{- define "gpudra.apiServerEnv" -}}
{{- $env := dict -}}
{{- with .Values.kubernetesServiceHost }}{{ $_ := set $env "KUBERNETES_SERVICE_HOST" (toString .) }}{{ end -}}
{{- with .Values.kubernetesServicePort }}{{ $_ := set $env "KUBERNETES_SERVICE_PORT" (toString .) }}{{ end -}}
{{- if $env }}{{ toJson $env }}{{ end -}}
{{- end -}}
