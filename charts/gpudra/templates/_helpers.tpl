{{/*
Set (or add) one environment variable of a container: dict "container" C "name" N "value" V.
*/}}
{{- define "gpudra.setEnv" -}}
{{- $env := list -}}
{{- $found := false -}}
{{- range .container.env -}}
{{- if eq .name $.name -}}
{{- $env = append $env (dict "name" $.name "value" (toString $.value)) -}}
{{- $found = true -}}
{{- else -}}
{{- $env = append $env . -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- $env = append $env (dict "name" .name "value" (toString .value)) -}}
{{- end -}}
{{- $_ := set .container "env" $env -}}
{{- end -}}

{{/*
Remove one environment variable (dict "container" C "name" N), or a port (dict "container" C "port" P).
*/}}
{{- define "gpudra.drop" -}}
{{- if .name -}}
{{- $env := list -}}
{{- range .container.env }}{{ if ne .name $.name }}{{ $env = append $env . }}{{ end }}{{ end -}}
{{- $_ := set .container "env" $env -}}
{{- else -}}
{{- $ports := list -}}
{{- range .container.ports }}{{ if ne .name $.port }}{{ $ports = append $ports . }}{{ end }}{{ end -}}
{{- $_ := set .container "ports" $ports -}}
{{- end -}}
{{- end -}}

{{/*
What both workloads take from the values: image, resources, scheduling, the API server's address, extra settings
(dict "pod" P "v" V "root" $).
*/}}
{{- define "gpudra.workload" -}}
{{- $spec := .pod.spec.template.spec -}}
{{- $c := index $spec.containers 0 -}}
{{- $image := .root.Values.image -}}
{{- $_ := set $c "image" (printf "%s:%s" $image.repository $image.tag) -}}
{{- if $image.pullPolicy }}{{ $_ := set $c "imagePullPolicy" $image.pullPolicy }}{{ end -}}
{{- if .v.resources }}{{ $_ := set $c "resources" .v.resources }}{{ end -}}
{{- if .v.nodeSelector }}{{ $_ := set $spec "nodeSelector" .v.nodeSelector }}{{ end -}}
{{- if .v.tolerations }}{{ $_ := set $spec "tolerations" .v.tolerations }}{{ end -}}
{{- if ne .root.Values.driverName "gpu.nvidia.com" -}}
{{- include "gpudra.setEnv" (dict "container" $c "name" "GPUDRA_DRIVER_NAME" "value" .root.Values.driverName) -}}
{{- end -}}
{{- with .root.Values.kubernetesServiceHost -}}
{{- include "gpudra.setEnv" (dict "container" $c "name" "KUBERNETES_SERVICE_HOST" "value" .) -}}
{{- end -}}
{{- with .root.Values.kubernetesServicePort -}}
{{- include "gpudra.setEnv" (dict "container" $c "name" "KUBERNETES_SERVICE_PORT" "value" .) -}}
{{- end -}}
{{- range $name, $value := .v.env -}}
{{- include "gpudra.setEnv" (dict "container" $c "name" $name "value" $value) -}}
{{- end -}}
{{- end -}}

{{/*
The API server's address for pods, where the values set it (a cluster without a service proxy), as JSON env.
*/}}
{{- define "gpudra.apiServerEnv" -}}
{{- $env := dict -}}
{{- with .Values.kubernetesServiceHost }}{{ $_ := set $env "KUBERNETES_SERVICE_HOST" (toString .) }}{{ end -}}
{{- with .Values.kubernetesServicePort }}{{ $_ := set $env "KUBERNETES_SERVICE_PORT" (toString .) }}{{ end -}}
{{- if $env }}{{ toJson $env }}{{ end -}}
{{- end -}}
