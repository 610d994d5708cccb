{{/*
The prefix of every object's name: the release's name when it holds the chart's, else both. With
`helm install flyte-mpi-webhook`, the names are those of config/ (namePrefix flyte-mpi-webhook-).
Truncated so that the longest suffix still makes a name of at most 63 characters.
*/}}
{{- define "flyte-mpi-webhook.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 32 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 32 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels every object carries. */}}
{{- define "flyte-mpi-webhook.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "flyte-mpi-webhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels that select the webhook's pods. */}}
{{- define "flyte-mpi-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The webhook's image: repository, then :tag (default the appVersion), then @digest. */}}
{{- define "flyte-mpi-webhook.image" -}}
{{- $image := .Values.image.repository -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if $tag }}{{ $image = printf "%s:%s" $image $tag }}{{ end -}}
{{- if .Values.image.digest }}{{ $image = printf "%s@%s" $image .Values.image.digest }}{{ end -}}
{{- $image -}}
{{- end -}}

{{/* Whether the webhook runs: "true" or "". */}}
{{- define "flyte-mpi-webhook.runsWebhook" -}}
{{- if ne .Values.mode "policy" }}true{{ end -}}
{{- end -}}

{{/* Whether the admission policies are installed: "true" or "". */}}
{{- define "flyte-mpi-webhook.runsPolicy" -}}
{{- if ne .Values.mode "webhook" }}true{{ end -}}
{{- end -}}

{{/* Names of the objects, referenced from more than one template. */}}
{{/*
A port of the webhook's pods, webhook.port, probePort or metricsPort: the value, or its default for
values that lack it (helm upgrade --reuse-values from a release before these values).
*/}}
{{- define "flyte-mpi-webhook.port" -}}
{{- $defaults := dict "port" 9443 "probePort" 8081 "metricsPort" 8080 -}}
{{- index ((index . 0).Values.webhook | default dict) (index . 1) | default (index $defaults (index . 1)) | int -}}
{{- end -}}

{{- define "flyte-mpi-webhook.serviceName" -}}{{ include "flyte-mpi-webhook.fullname" . }}-webhook-service{{- end -}}
{{- define "flyte-mpi-webhook.servingCertificateName" -}}{{ include "flyte-mpi-webhook.fullname" . }}-serving-cert{{- end -}}

{{/*
The Secret of the serving certificate: the one given, the one the chart or cert-manager writes and
the pods mount, or, with source self, the one the webhook keeps its CA and certificate in.
*/}}
{{- define "flyte-mpi-webhook.certSecretName" -}}
{{- if eq .Values.certificates.source "secret" -}}
{{- .Values.certificates.secret.name -}}
{{- else if eq .Values.certificates.source "self" -}}
{{- include "flyte-mpi-webhook.fullname" . }}-webhook-certs
{{- else -}}
{{- include "flyte-mpi-webhook.fullname" . }}-webhook-server-cert
{{- end -}}
{{- end -}}

{{/*
The certificates.self values, as JSON, with the chart's defaults where they lack one (helm upgrade
--reuse-values from a chart before source self), and each in minutes.
*/}}
{{- define "flyte-mpi-webhook.selfCertificates" -}}
{{- $self := mergeOverwrite (dict "caValidity" "87600h" "validity" "8760h") (deepCopy (.Values.certificates.self | default dict)) -}}
{{- range $name := list "caValidity" "validity" -}}
{{- $value := toString (index $self $name) -}}
{{- $_ := set $self (printf "%sMinutes" $name) (mul (trimSuffix "h" (trimSuffix "m" $value) | atoi) (hasSuffix "h" $value | ternary 60 1)) -}}
{{- end -}}
{{- toJson $self -}}
{{- end -}}

{{/*
The clientAuth values, as JSON, with the chart's defaults where they lack one: `helm upgrade
--reuse-values` from 0.1.0, which had no clientAuth, renders with 0.1.0's values, not this chart's. An
absent clientAuth is off, an absent caConfigMap config/client-auth's name, and an absent commonName
kube-apiserver, never "" (any certificate the CA signed).
*/}}
{{- define "flyte-mpi-webhook.clientAuth" -}}
{{- $c := .Values.clientAuth | default dict -}}
{{- toJson (dict
  "enabled" ($c.enabled | default false)
  "caConfigMap" ($c.caConfigMap | default (printf "%s-client-ca" (include "flyte-mpi-webhook.fullname" .)))
  "commonName" (hasKey $c "commonName" | ternary $c.commonName "kube-apiserver")) -}}
{{- end -}}

{{/*
The objectSelector and namespaceSelector the webhook and the policies share: they are called for
the same jobs. The release's namespace is always excluded, as config/default excludes its own.
*/}}
{{- define "flyte-mpi-webhook.selectors" -}}
objectSelector:
  {{- toYaml .Values.webhook.objectSelector | nindent 2 }}
namespaceSelector:
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ append .Values.webhook.excludedNamespaces .Release.Namespace | uniq | toJson }}
  {{- with .Values.webhook.namespaceSelectorExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* The policies' matchConstraints: scoped exactly as the webhook. */}}
{{- define "flyte-mpi-webhook.policyMatchConstraints" -}}
resourceRules:
- apiGroups: ["kubeflow.org"]
  apiVersions: ["v1", "v2beta1"]
  operations: ["CREATE"]
  resources: ["mpijobs"]
  scope: Namespaced
matchPolicy: Equivalent
{{ include "flyte-mpi-webhook.selectors" . }}
{{- end -}}

{{/*
The webhook's decision flags that differ from the binary's defaults (webhook -h), so that the
default install passes the flags config/manager passes and no other, and the log level. A value goes
through the kubelet's $(VAR) expansion, so each $ is doubled.
*/}}
{{- define "flyte-mpi-webhook.decisionArgs" -}}
{{- include "flyte-mpi-webhook.decisionFlags" . }}
{{- if ne (toString .Values.logLevel) "info" }}
- {{ printf "--zap-log-level=%v" .Values.logLevel | toJson }}
{{- end }}
{{- end -}}

{{/* The decision flags alone, which the server and `webhook check` (helm test) share. */}}
{{- define "flyte-mpi-webhook.decisionFlags" -}}
{{- $d := .Values.decisions -}}
{{- if $d.fallbackWorkerCommand }}
- {{ printf "--fallback-worker-command=%s" (replace "$" "$$" $d.fallbackWorkerCommand) | toJson }}
{{- end }}
{{- if ne $d.onInvalid "deny" }}
- {{ printf "--on-invalid=%s" $d.onInvalid | toJson }}
{{- end }}
{{- if not $d.inferWorkerCommand }}
- --infer-worker-command=false
{{- end }}
{{- if ne $d.injectAs "command" }}
- {{ printf "--inject-as=%s" $d.injectAs | toJson }}
{{- end }}
{{- if ne $d.containerName "mpi" }}
- {{ printf "--container-name=%s" (replace "$" "$$" $d.containerName) | toJson }}
{{- end }}
{{- if $d.flyteTaskSelector }}
- {{ printf "--flyte-task-selector=%s" (replace "$" "$$" $d.flyteTaskSelector) | toJson }}
{{- end }}
{{- end -}}

{{/*
The hooks' values, as JSON, with the chart's defaults where they lack one: `helm upgrade
--reuse-values` from a release before them renders with that release's values. testNamespace is the
namespace helm test creates its MPIJobs in: the one given, or one the test makes (createTestNamespace).
*/}}
{{- define "flyte-mpi-webhook.hooks" -}}
{{- $h := .Values.hooks | default dict -}}
{{- $test := $h.test | default dict -}}
{{- $preDelete := $h.preDelete | default dict -}}
{{- toJson (dict
  "testNamespace" ($test.namespace | default (printf "%s-helm-test" (include "flyte-mpi-webhook.fullname" .)))
  "createTestNamespace" (not $test.namespace)
  "mpiJobVersion" ($test.mpiJobVersion | default "")
  "preDelete" (hasKey $preDelete "enabled" | ternary $preDelete.enabled true)
  "resources" ($h.resources | default (dict "requests" (dict "cpu" "10m" "memory" "32Mi") "limits" (dict "cpu" "100m" "memory" "64Mi")))) -}}
{{- end -}}

{{/*
The labels of the hooks' objects, for (list $ component). Not the selector labels: the Service, the
PodDisruptionBudget and the NetworkPolicy select the webhook's pods by those, and must not select
a hook's.
*/}}
{{- define "flyte-mpi-webhook.hookLabels" -}}
{{- $ := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $.Chart.Name $.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
{{- end -}}

{{/*
The spec of a hook's pod, but its containers: the webhook's image, with the ServiceAccount (list $
account), on the nodes the webhook's pods may run on, as Pod Security's restricted profile asks.
*/}}
{{- define "flyte-mpi-webhook.hookPodSpec" -}}
{{- $ := index . 0 -}}
serviceAccountName: {{ index . 1 }}
restartPolicy: Never
securityContext:
  runAsNonRoot: true
  seccompProfile:
    type: RuntimeDefault
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The parts of a hook's container beside its name and arguments. */}}
{{- define "flyte-mpi-webhook.hookContainer" -}}
image: {{ include "flyte-mpi-webhook.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
resources:
  {{- toYaml (include "flyte-mpi-webhook.hooks" . | fromJson).resources | nindent 2 }}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop:
    - ALL
{{- end -}}

{{/*
The checks across values that values.schema.json cannot make; each failure names the value and
says what to set.
*/}}
{{- define "flyte-mpi-webhook.validate" -}}
{{- $webhook := include "flyte-mpi-webhook.runsWebhook" . -}}
{{- if and $webhook (not .Values.image.repository) -}}
{{- fail (printf "image.repository is required with mode=%s: the chart has no default image, so that no install runs a placeholder under failurePolicy Fail. Set --set image.repository=REGISTRY/flyte-mpi-webhook (the tag defaults to the chart's appVersion, %s), or mode=policy to run no webhook" .Values.mode .Chart.AppVersion) -}}
{{- end -}}
{{- if and (include "flyte-mpi-webhook.runsPolicy" .) (not (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")) -}}
{{- fail (printf "mode=%s needs admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, which Kubernetes serves from 1.36; this cluster (Kubernetes %s) does not serve it. Use mode=webhook, or with helm template pass --api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" .Values.mode .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if include "flyte-mpi-webhook.runsPolicy" . -}}
{{- $d := .Values.decisions -}}
{{- range $name, $default := dict "injectAs" "command" "containerName" "mpi" "fallbackWorkerCommand" "" -}}
{{- if ne (index $d $name) $default -}}
{{- fail (printf "decisions.%s=%q: mode=%s installs the admission policy, which implements the binary's default %q only; use mode=webhook for another value" $name (index $d $name) $.Values.mode $default) -}}
{{- end -}}
{{- end -}}
{{- if not $d.inferWorkerCommand -}}
{{- fail (printf "decisions.inferWorkerCommand=false: mode=%s installs the admission policy, which always takes the worker command a task declared; use mode=webhook to turn it off" .Values.mode) -}}
{{- end -}}
{{- end -}}
{{- if $webhook -}}
{{- $ports := dict -}}
{{- range $name := list "port" "probePort" "metricsPort" -}}
{{- $port := include "flyte-mpi-webhook.port" (list $ $name) -}}
{{- with index $ports $port -}}
{{- fail (printf "webhook.%s and webhook.%s are both %s: the webhook's pods serve the webhook, the probes and the metrics on three ports" . $name $port) -}}
{{- end -}}
{{- $_ := set $ports $port $name -}}
{{- end -}}
{{- if and (.Values.webhook | default dict).hostNetwork (hasKey $ports "10250") -}}
{{- fail (printf "webhook.%s=10250 with webhook.hostNetwork: the kubelet holds port 10250 on every node; take another port (on GKE private clusters, 10250 is for pods on the Pod network, not on the node's)" (index $ports "10250")) -}}
{{- end -}}
{{- if and (eq .Values.certificates.source "certManager") (not (.Capabilities.APIVersions.Has "cert-manager.io/v1")) -}}
{{- fail "certificates.source=certManager needs cert-manager (the cert-manager.io/v1 API), which this cluster does not serve: install cert-manager first, or use certificates.source=generate (with helm template, pass --api-versions cert-manager.io/v1)" -}}
{{- end -}}
{{- if eq .Values.certificates.source "self" -}}
{{- $self := include "flyte-mpi-webhook.selfCertificates" . | fromJson -}}
{{- if lt (int $self.validityMinutes) 5 -}}
{{- fail (printf "certificates.self.validity=%s: at least 5m, so that each step of a CA's replacement gets its minute" $self.validity) -}}
{{- end -}}
{{- if lt (int $self.caValidityMinutes) (int $self.validityMinutes) -}}
{{- fail (printf "certificates.self.caValidity=%s is shorter than certificates.self.validity=%s: a serving certificate never outlives its CA" $self.caValidity $self.validity) -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.apiServerTo) -}}
{{- fail "networkPolicy.apiServerTo is required with networkPolicy.enabled and certificates.source=self: the webhook reads and writes its Secret and caBundle through the API server, and the policy allows no other egress; give the control plane's addresses as ipBlocks" -}}
{{- end -}}
{{- end -}}
{{- if eq .Values.certificates.source "secret" -}}
{{- if not .Values.certificates.secret.name -}}
{{- fail "certificates.secret.name is required with certificates.source=secret: the kubernetes.io/tls Secret, in the release's namespace, that holds tls.crt and tls.key" -}}
{{- end -}}
{{- if not .Values.certificates.secret.caBundle -}}
{{- fail "certificates.secret.caBundle is required with certificates.source=secret: the base64-encoded PEM of the CA that signed the Secret's tls.crt, which the API server trusts" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (include "flyte-mpi-webhook.clientAuth" . | fromJson).enabled (not $webhook) -}}
{{- fail "clientAuth.enabled: mode=policy runs no webhook, so there is no server to require the API server's client certificate; use mode=webhook or both" -}}
{{- end -}}
{{- $hooks := include "flyte-mpi-webhook.hooks" . | fromJson -}}
{{- if not $hooks.createTestNamespace -}}
{{- $excluded := append .Values.webhook.excludedNamespaces .Release.Namespace -}}
{{- if has $hooks.testNamespace $excluded -}}
{{- fail (printf "hooks.test.namespace=%s: the webhook and the policy are never called for that namespace (webhook.excludedNamespaces, and the release's own), so helm test would always fail there; name a namespace Flyte runs its jobs in, or leave it empty for one the test makes" $hooks.testNamespace) -}}
{{- end -}}
{{- end -}}
{{- $pdb := .Values.podDisruptionBudget -}}
{{- if and $webhook $pdb.enabled (gt (int .Values.replicas) 1) -}}
{{- $min := int $pdb.minAvailable -}}
{{- if kindIs "string" $pdb.minAvailable -}}
{{- $min = div (add (mul (trimSuffix "%" $pdb.minAvailable | atoi) .Values.replicas) 99) 100 -}}
{{- end -}}
{{- if ge (int $min) (int .Values.replicas) -}}
{{- fail (printf "podDisruptionBudget.minAvailable=%v keeps all %d replicas running: no pod could ever be evicted, and every node drain would wait for ever. Set it below replicas (1 with 2 replicas), or podDisruptionBudget.enabled=false" $pdb.minAvailable (int .Values.replicas)) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled $webhook (not .Values.networkPolicy.webhookFrom) -}}
{{- fail "networkPolicy.webhookFrom is required with networkPolicy.enabled: the peers the API server's calls come from (the control plane's ipBlocks, or the konnectivity agent's pods), else the policy would refuse them all and every Flyte MPIJob with them" -}}
{{- end -}}
{{- range $name := list "serviceMonitor" "prometheusRule" -}}
{{- if and (index $.Values $name).enabled (not ($.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
{{- fail (printf "%s.enabled needs the prometheus-operator's monitoring.coreos.com/v1 API, which this cluster does not serve (with helm template, pass --api-versions monitoring.coreos.com/v1)" $name) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled (not $webhook) -}}
{{- fail "serviceMonitor.enabled: mode=policy runs no webhook, so there are no metrics to scrape (prometheusRule.enabled alerts on the policies' errors, from the API server's metrics)" -}}
{{- end -}}
{{- $rule := .Values.prometheusRule | default dict -}}
{{- if and $rule.enabled $webhook (not .Values.serviceMonitor.enabled) (not $rule.scrapeJob) -}}
{{- fail "prometheusRule.enabled without serviceMonitor.enabled: the alert FlyteMPIWebhookDown watches the scrape job of the chart's ServiceMonitor, which would not exist and so would fire for ever; set serviceMonitor.enabled=true, or prometheusRule.scrapeJob to the job of the Prometheus that scrapes the webhook" -}}
{{- end -}}
{{- $dashboard := .Values.grafanaDashboard | default dict -}}
{{- if and $dashboard.enabled (not $dashboard.labels) -}}
{{- fail "grafanaDashboard.labels is empty: Grafana's dashboard sidecar finds a dashboard's ConfigMap by a label (the Grafana chart's sidecar.dashboards.label, grafana_dashboard by default); set grafanaDashboard.labels.grafana_dashboard=\"1\", or the label your sidecar selects" -}}
{{- end -}}
{{- end -}}
