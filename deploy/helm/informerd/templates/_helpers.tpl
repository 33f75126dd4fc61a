{{/* The release's full name: the release name when it holds the chart's, else release-chart. */}}
{{- define "informerd.fullname" -}}
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

{{- define "informerd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "informerd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "informerd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "informerd.labels" -}}
{{ include "informerd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- if not .Values.plainManifests }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}
{{- end -}}

{{- define "informerd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "informerd.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name the existing service account when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "informerd.leaseName" -}}
{{- default (include "informerd.fullname" .) .Values.leaderElection.leaseName -}}
{{- end -}}

{{- define "informerd.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
What the values must not say, refused with the value's name (the schema checks types; these are
the rules between values). Included by the config template, so every render checks them.
*/}}
{{- define "informerd.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicaCount: %d replicas need leaderElection.enabled (without it every replica would serve the queues, and no key would be held by one worker)" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and (not .Values.insecureAllowUnauthenticated) (not .Values.tls.secretName) -}}
{{- fail "tls.secretName: required while authentication is on (callers' bearer tokens must not cross the network in clear); create a kubernetes.io/tls Secret and name it here" -}}
{{- end -}}
{{- if and .Values.tls.clientCASecretName (not .Values.tls.secretName) -}}
{{- fail "tls.clientCASecretName: client certificates need the server's TLS too (tls.secretName)" -}}
{{- end -}}
{{- range $key := list "listen" "metricsListen" "statusListen" "tls" "clusters" "leaderElection" "shutdownGracePeriod" "insecureAllowUnauthenticated" -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "config.%s: set by the chart from its own values (service, statusPort, tls, leaderElection, shutdownGracePeriod, insecureAllowUnauthenticated); remove it from config" $key) -}}
{{- end -}}
{{- end -}}
{{- range $i, $inf := .Values.config.informers -}}
{{- $where := printf "config.informers[%d]" $i -}}
{{- if not (kindIs "map" $inf.resource) -}}
{{- fail (printf "%s.resource: required ({group, version, resource})" $where) -}}
{{- end -}}
{{- if or (contains "*" (toString $inf.resource.resource)) (contains "*" (toString (default "" $inf.resource.group))) -}}
{{- fail (printf "%s.resource: %q of group %q: a wildcard would let informerd hold every object of the cluster, Secrets included; name the resource" $where (toString $inf.resource.resource) (toString (default "" $inf.resource.group))) -}}
{{- end -}}
{{- if and $inf.cluster (ne (toString $inf.cluster) "local") -}}
{{- fail (printf "%s.cluster: %q: the chart configures one cluster, \"local\" (the one it runs in)" $where (toString $inf.cluster)) -}}
{{- end -}}
{{- end -}}
{{- range $i, $r := .Values.rbac.extraInformerResources -}}
{{- if or (contains "*" (toString (default "" $r.group))) (has "*" $r.resources) -}}
{{- fail (printf "rbac.extraInformerResources[%d]: no wildcards (informerd would hold every object of the cluster, Secrets included)" $i) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The daemon's config.yaml: the chart's keys, then the user's config. */}}
{{- define "informerd.config" -}}
{{- include "informerd.validate" . -}}
{{- $c := dict "listen" (list (printf "0.0.0.0:%d" (int .Values.service.grpcPort))) "metricsListen" (printf "0.0.0.0:%d" (int .Values.service.metricsPort)) "shutdownGracePeriod" .Values.shutdownGracePeriod "clusters" (list (dict "name" "local" "inCluster" true)) -}}
{{- if .Values.statusPort -}}
{{- $_ := set $c "statusListen" (printf "0.0.0.0:%d" (int .Values.statusPort)) -}}
{{- end -}}
{{- if .Values.tls.secretName -}}
{{- $tls := dict "cert" "/etc/informerd/tls/tls.crt" "key" "/etc/informerd/tls/tls.key" -}}
{{- if .Values.tls.clientCASecretName -}}
{{- $_ := set $tls "clientCa" "/etc/informerd/client-ca/ca.crt" -}}
{{- end -}}
{{- $_ := set $c "tls" $tls -}}
{{- end -}}
{{- if .Values.insecureAllowUnauthenticated -}}
{{- $_ := set $c "insecureAllowUnauthenticated" true -}}
{{- end -}}
{{- if .Values.leaderElection.enabled -}}
{{- $_ := set $c "leaderElection" (dict "enabled" true "lease" (dict "namespace" .Release.Namespace "name" (include "informerd.leaseName" .)) "leaseDuration" .Values.leaderElection.leaseDuration "renewDeadline" .Values.leaderElection.renewDeadline "retryPeriod" .Values.leaderElection.retryPeriod) -}}
{{- end -}}
{{- toYaml (merge $c (deepCopy .Values.config)) -}}
{{- end -}}

{{/*
The informers' API resources, as RBAC rules ({apiGroups, resources, verbs: [list, watch]}, one per
group, resources sorted): "cluster" for informers without a namespace (and extraInformerResources),
one list per namespace for the others.
*/}}
{{- define "informerd.informerRules" -}}
{{- $byScope := dict -}}
{{- range $inf := .Values.config.informers -}}
{{- $scope := default "" $inf.namespace | toString -}}
{{- $scope = ternary "cluster" (printf "ns/%s" $scope) (eq $scope "") -}}
{{- $groups := get $byScope $scope | default dict -}}
{{- $g := default "" $inf.resource.group | toString -}}
{{- $_ := set $groups $g (append (get $groups $g | default list) (toString $inf.resource.resource)) -}}
{{- $_ := set $byScope $scope $groups -}}
{{- end -}}
{{- range $r := .Values.rbac.extraInformerResources -}}
{{- $groups := get $byScope "cluster" | default dict -}}
{{- $g := default "" $r.group | toString -}}
{{- $_ := set $groups $g (concat (get $groups $g | default list) $r.resources) -}}
{{- $_ := set $byScope "cluster" $groups -}}
{{- end -}}
{{- $out := dict -}}
{{- range $scope, $groups := $byScope -}}
{{- $rules := list -}}
{{- range $g := keys $groups | sortAlpha -}}
{{- $rules = append $rules (dict "apiGroups" (list $g) "resources" (get $groups $g | uniq | sortAlpha) "verbs" (list "list" "watch")) -}}
{{- end -}}
{{- $_ := set $out $scope $rules -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* A duration like 30s, 2m or 1m30s in whole seconds (what terminationGracePeriodSeconds takes). */}}
{{- define "informerd.seconds" -}}
{{- $d := toString . -}}
{{- if or (eq $d "") (not (regexMatch "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$" $d)) -}}
{{- fail (printf "shutdownGracePeriod: %q is not a duration like 30s, 2m or 1m30s" $d) -}}
{{- end -}}
{{- $s := 0 -}}
{{- range $part := regexFindAll "[0-9]+[hms]" $d -1 -}}
{{- $n := trimSuffix "h" (trimSuffix "m" (trimSuffix "s" $part)) | int -}}
{{- if hasSuffix "h" $part }}{{ $s = add $s (mul $n 3600) }}{{ else if hasSuffix "m" $part }}{{ $s = add $s (mul $n 60) }}{{ else }}{{ $s = add $s $n }}{{ end -}}
{{- end -}}
{{- $s -}}
{{- end -}}
