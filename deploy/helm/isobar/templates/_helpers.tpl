{{/* The `isobar` image reference. */}}
{{- define "isobar.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
