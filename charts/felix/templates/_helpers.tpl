{{- define "felix.labels" -}}
app.kubernetes.io/name: felix
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}
{{- define "felix.fullname" -}}
{{ .Release.Name }}-felix-operator
{{- end }}
{{- define "felix.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}
{{ .Values.serviceAccount.name }}
{{- else -}}
{{ include "felix.fullname" . }}
{{- end -}}
{{- end }}
