{{/*
Combinations the schema cannot express, refused at render time with a
message that names the values to change. Each mirrors a rule compactd
enforces at start-up, or a way the Deployment could not work.
*/}}
{{- define "compactd.validate" -}}
{{- $v := .Values -}}
{{- $a := $v.auth -}}

{{- if not (or $a.configSecret.enabled $a.jwt.enabled $a.mtls.enabled) -}}
{{- fail "compactd: no authentication configured. Enable auth.configSecret (API keys in a Secret you create), auth.jwt or auth.mtls: compactd refuses to serve a non-loopback address without one." -}}
{{- end -}}
{{- if and $v.tls.enabled $a.mtls.enabled -}}
{{- fail "compactd: tls.enabled and auth.mtls.enabled both configure the server certificate; with mTLS set tls.enabled=false." -}}
{{- end -}}
{{- if and (or $a.configSecret.enabled $a.jwt.enabled) (not (or $v.tls.enabled $a.mtls.enabled $v.allowPlaintextBehindTlsTerminator)) -}}
{{- fail "compactd: API keys (auth.configSecret) and JWTs would cross the network in cleartext. Enable tls (or auth.mtls), or set allowPlaintextBehindTlsTerminator=true when a mesh sidecar terminates TLS in front of the pod." -}}
{{- end -}}
{{- if $a.jwt.enabled -}}
{{- if not (and $a.jwt.issuer $a.jwt.audience) -}}
{{- fail "compactd: auth.jwt needs issuer and audience." -}}
{{- end -}}
{{- if not (or $a.jwt.jwksSecret.name $a.jwt.hs256Secret.name) -}}
{{- fail "compactd: auth.jwt needs its keys: auth.jwt.jwksSecret.name (RS256/ES256 JWKS) or auth.jwt.hs256Secret.name." -}}
{{- end -}}
{{- end -}}
{{- if $a.mtls.enabled -}}
{{- if not (and $a.mtls.secret.name $a.mtls.trustDomain) -}}
{{- fail "compactd: auth.mtls needs secret.name (server pair and client CA) and trustDomain." -}}
{{- end -}}
{{- end -}}

{{- if eq $v.storage.backend "s3" -}}
{{- if not $v.storage.s3.bucket -}}
{{- fail "compactd: storage.backend s3 needs storage.s3.bucket." -}}
{{- end -}}
{{- if not $v.storage.kms.keyId -}}
{{- fail "compactd: storage.backend s3 needs storage.kms.keyId. Replicas must share the key service, and a local keyring cannot come from a Secret (compactd refuses a keyring file readable by its group, which is how Kubernetes mounts Secrets for a non-root user)." -}}
{{- end -}}
{{- else -}}
{{- if or (gt (int $v.replicaCount) 1) $v.autoscaling.enabled -}}
{{- fail "compactd: storage.backend fs keeps plans and artifacts on one pod's volume: set replicaCount=1 and autoscaling.enabled=false, or use storage.backend s3 to run several replicas." -}}
{{- end -}}
{{- end -}}
{{- if and $v.storage.kms.tenantKeys (not $v.storage.kms.keyId) -}}
{{- fail "compactd: storage.kms.tenantKeys needs storage.kms.keyId (the key of every other tenant)." -}}
{{- end -}}
{{- if and (eq $v.storage.backend "fs") $v.storage.persistence.enabled (include "compactd.usesKeyring" .) (not $v.keyring.persistence.enabled) -}}
{{- fail "compactd: storage.persistence keeps the artifacts, but the keyring that decrypts them would be lost with the pod. Set keyring.persistence.enabled=true (or use storage.kms.keyId)." -}}
{{- end -}}

{{- if $v.plugins.load -}}
{{- if eq (empty $v.plugins.image.repository) (empty $v.plugins.volume) -}}
{{- fail "compactd: plugins.load needs exactly one source: plugins.image.repository (copied by an init container) or plugins.volume." -}}
{{- end -}}
{{- if and $v.plugins.image.repository (not (or $v.plugins.image.tag $v.plugins.image.digest)) -}}
{{- fail "compactd: plugins.image needs a tag or, better, a digest." -}}
{{- end -}}
{{- $names := dict -}}
{{- range $v.plugins.load -}}
{{- if hasKey $names .path -}}
{{- fail (printf "compactd: plugins.load lists %s twice." .path) -}}
{{- end -}}
{{- $_ := set $names .path true -}}
{{- end -}}
{{- end -}}

{{- if eq (int $v.service.port) (int $v.health.port) -}}
{{- fail "compactd: health.port must differ from service.port." -}}
{{- end -}}
{{- if ge (int $v.preStopSleepSeconds) (int $v.terminationGracePeriodSeconds) -}}
{{- fail "compactd: preStopSleepSeconds must be shorter than terminationGracePeriodSeconds, or SIGTERM never gets to drain the calls in flight." -}}
{{- end -}}
{{- if and $v.autoscaling.enabled (gt (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) -}}
{{- fail "compactd: autoscaling.minReplicas exceeds autoscaling.maxReplicas." -}}
{{- end -}}
{{- if $v.podDisruptionBudget.enabled -}}
{{- if eq (kindIs "invalid" $v.podDisruptionBudget.minAvailable) (kindIs "invalid" $v.podDisruptionBudget.maxUnavailable) -}}
{{- fail "compactd: podDisruptionBudget needs exactly one of minAvailable and maxUnavailable." -}}
{{- end -}}
{{- end -}}
{{- end -}}
