{{/*
compactd's config file, built from the values: `settings` as given, then
everything the chart wires (listeners, stores, auth files, TLS, summarizer
key, plugins, telemetry) set over it. The paths are where deployment.yaml
mounts the Secrets and volumes.
*/}}
{{- define "compactd.config" -}}
{{- $v := .Values -}}
{{- $c := deepCopy $v.settings -}}
{{- $_ := set $c "listen" (include "compactd.addr" (list $v.bindAddress $v.service.port)) -}}
{{- $_ = set $c "health_listen" (include "compactd.addr" (list $v.bindAddress $v.health.port)) -}}
{{- $_ = set $c "data_dir" (include "compactd.dataDir" .) -}}
{{- if include "compactd.usesKeyring" . -}}
{{- $_ = set $c "keyring_file" (printf "%s/keyring.json" (include "compactd.keyringDir" .)) -}}
{{- end -}}

{{- /* Stores: artifacts and plans in the same place. */ -}}
{{- $artifacts := dict "backend" $v.storage.backend -}}
{{- if eq $v.storage.backend "s3" -}}
{{- $s3 := dict "bucket" $v.storage.s3.bucket "prefix" $v.storage.s3.prefix -}}
{{- with $v.storage.s3.region }}{{ $_ = set $s3 "region" . }}{{ end -}}
{{- with $v.storage.s3.endpointUrl }}{{ $_ = set $s3 "endpoint_url" . }}{{ end -}}
{{- if kindIs "bool" $v.storage.s3.forcePathStyle }}{{ $_ = set $s3 "force_path_style" $v.storage.s3.forcePathStyle }}{{ end -}}
{{- $_ = set $artifacts "s3" $s3 -}}
{{- end -}}
{{- if $v.storage.kms.keyId -}}
{{- $kms := dict "key_id" $v.storage.kms.keyId -}}
{{- with $v.storage.kms.tenantKeys }}{{ $_ = set $kms "tenant_keys" . }}{{ end -}}
{{- with $v.storage.kms.region }}{{ $_ = set $kms "region" . }}{{ end -}}
{{- with $v.storage.kms.endpointUrl }}{{ $_ = set $kms "endpoint_url" . }}{{ end -}}
{{- $_ = set $artifacts "kms" $kms -}}
{{- end -}}
{{- $_ = set $c "artifacts" $artifacts -}}
{{- $_ = set $c "plans" (dict "backend" $v.storage.backend) -}}

{{- /* Auth: JWT and mTLS here; API keys come from the auth Secret's file. */ -}}
{{- $auth := dict "dev" false -}}
{{- if $v.auth.jwt.enabled -}}
{{- $j := $v.auth.jwt -}}
{{- $jwt := dict "issuer" $j.issuer "audience" $j.audience "tenant_claim" $j.tenantClaim "permissions_claim" $j.permissionsClaim "leeway_seconds" $j.leewaySeconds -}}
{{- if $j.jwksSecret.name }}{{ $_ = set $jwt "jwks_file" (printf "%s/%s" (include "compactd.jwksDir" .) $j.jwksSecret.key) }}{{ end -}}
{{- if $j.hs256Secret.name }}{{ $_ = set $jwt "hs256_secret_file" (printf "%s/%s" (include "compactd.hs256Dir" .) $j.hs256Secret.key) }}{{ end -}}
{{- $_ = set $auth "jwt" $jwt -}}
{{- end -}}
{{- if $v.auth.mtls.enabled -}}
{{- $m := $v.auth.mtls -}}
{{- $dir := include "compactd.mtlsDir" . -}}
{{- $_ = set $auth "mtls" (dict "ca_file" (printf "%s/%s" $dir $m.secret.caKey) "cert_file" (printf "%s/%s" $dir $m.secret.certKey) "key_file" (printf "%s/%s" $dir $m.secret.keyKey) "trust_domain" $m.trustDomain "permissions" $m.permissions) -}}
{{- end -}}
{{- $_ = set $c "auth" $auth -}}
{{- if and $v.tls.enabled (not $v.auth.mtls.enabled) -}}
{{- $dir := include "compactd.tlsDir" . -}}
{{- $_ = set $c "tls" (dict "cert_file" (printf "%s/%s" $dir $v.tls.secret.certKey) "key_file" (printf "%s/%s" $dir $v.tls.secret.keyKey) "reload_interval_seconds" $v.tls.reloadIntervalSeconds) -}}
{{- end -}}
{{- $_ = set $c "allow_plaintext_behind_tls_terminator" $v.allowPlaintextBehindTlsTerminator -}}

{{- /* Summarizer: the key is a file from a Secret, never a value. */ -}}
{{- $sum := deepCopy $v.summarizer.options -}}
{{- $_ = set $sum "kind" $v.summarizer.kind -}}
{{- $_ = set $sum "base_url" $v.summarizer.baseUrl -}}
{{- $_ = set $sum "model" $v.summarizer.model -}}
{{- if $v.summarizer.apiKeySecret.name -}}
{{- $_ = set $sum "api_key_file" (printf "%s/%s" (include "compactd.llmKeyDir" .) $v.summarizer.apiKeySecret.key) -}}
{{- end -}}
{{- $_ = set $c "summarizer" $sum -}}

{{- if $v.plugins.load -}}
{{- $_ = set $c "plugins" (dict "dir" (include "compactd.pluginsDir" .) "load" (deepCopy $v.plugins.load)) -}}
{{- end -}}

{{- $tel := dict "service_name" $v.telemetry.serviceName "hash_tenant_ids" $v.telemetry.hashTenantIds "export_timeout_ms" $v.telemetry.exportTimeoutMs "export_delay_ms" $v.telemetry.exportDelayMs "metrics" $v.telemetry.metrics "metrics_interval_ms" $v.telemetry.metricsIntervalMs "tenant_metrics" $v.telemetry.tenantMetrics "capture_content" $v.telemetry.captureContent -}}
{{- with $v.telemetry.otlpEndpoint }}{{ $_ = set $tel "otlp_endpoint" . }}{{ end -}}
{{- $_ = set $c "telemetry" $tel -}}
{{- toYaml $c -}}
{{- end -}}
