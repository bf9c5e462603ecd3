{{- define "felix.labels" -}}
app.kubernetes.io/name: felix
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}
{{- define "felix.fullname" -}}
{{ .Release.Name }}-felix-operator
{{- end }}
