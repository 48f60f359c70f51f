{{/* Names, labels and the paths the Deployment and the config share. */}}

{{- define "compactd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "compactd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "compactd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "compactd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "compactd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "compactd.labels" -}}
helm.sh/chart: {{ include "compactd.chart" . }}
{{ include "compactd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "compactd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "compactd.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository[:tag][@digest]; a digest pins the image. Argument: an image dict and the default tag. */}}
{{- define "compactd.imageRef" -}}
{{- $img := index . 0 -}}
{{- $defaultTag := index . 1 -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default $defaultTag $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "compactd.authSecretName" -}}
{{- default (printf "%s-auth" (include "compactd.fullname" .)) .Values.auth.configSecret.name -}}
{{- end -}}

{{- define "compactd.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "compactd.fullname" .)) .Values.tls.secret.name -}}
{{- end -}}

{{/* Fixed paths inside the container. */}}
{{- define "compactd.configDir" -}}/etc/compactd/config{{- end -}}
{{- define "compactd.authDir" -}}/etc/compactd/secrets{{- end -}}
{{- define "compactd.jwksDir" -}}/etc/compactd/jwt{{- end -}}
{{- define "compactd.hs256Dir" -}}/etc/compactd/jwt-hs256{{- end -}}
{{- define "compactd.tlsDir" -}}/etc/compactd/tls{{- end -}}
{{- define "compactd.mtlsDir" -}}/etc/compactd/mtls{{- end -}}
{{- define "compactd.llmKeyDir" -}}/etc/compactd/llm{{- end -}}
{{- define "compactd.dataDir" -}}/var/lib/compactd{{- end -}}
{{- define "compactd.keyringDir" -}}/var/lib/compactd-keyring{{- end -}}
{{- define "compactd.pluginsMount" -}}/opt/compactd/plugins{{- end -}}
{{- define "compactd.awsTokenDir" -}}/var/run/secrets/compactd/aws{{- end -}}

{{/* The directory compactd loads plugins from. */}}
{{- define "compactd.pluginsDir" -}}
{{- if .Values.plugins.image.repository -}}
{{- printf "%s/lib" (include "compactd.pluginsMount" .) -}}
{{- else if .Values.plugins.volumeSubdir -}}
{{- printf "%s/%s" (include "compactd.pluginsMount" .) .Values.plugins.volumeSubdir -}}
{{- else -}}
{{- include "compactd.pluginsMount" . -}}
{{- end -}}
{{- end -}}

{{/* host:port for a listener on the bind address. */}}
{{- define "compactd.addr" -}}
{{- $bind := index . 0 -}}
{{- $port := index . 1 -}}
{{- if contains ":" $bind -}}
{{- printf "[%s]:%d" $bind (int $port) -}}
{{- else -}}
{{- printf "%s:%d" $bind (int $port) -}}
{{- end -}}
{{- end -}}

{{/* Does the release talk to AWS (S3, KMS, STS)? */}}
{{- define "compactd.usesAws" -}}
{{- if or (eq .Values.storage.backend "s3") .Values.storage.kms.keyId -}}true{{- end -}}
{{- end -}}

{{/* Does the release need the local keyring? */}}
{{- define "compactd.usesKeyring" -}}
{{- if not .Values.storage.kms.keyId -}}true{{- end -}}
{{- end -}}

{{/* Every container, init containers included: non-root, read-only root, nothing to escalate. */}}
{{- define "compactd.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}
