package helm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// image is the image repository the renderings run.
const image = "registry.example/flyte-mpi-webhook"

// withImage returns values with image.repository set, and more values given
// as dotted paths ("webhook.failurePolicy") to values.
func withImage(more ...any) map[string]any {
	return values(append([]any{"image.repository", image}, more...)...)
}

// values builds chart values from pairs of a dotted path and a value.
func values(pairs ...any) map[string]any {
	out := map[string]any{}
	for i := 0; i < len(pairs); i += 2 {
		keys := strings.Split(pairs[i].(string), ".")
		node := out
		for _, key := range keys[:len(keys)-1] {
			next, ok := node[key].(map[string]any)
			if !ok {
				next = map[string]any{}
				node[key] = next
			}
			node = next
		}
		node[keys[len(keys)-1]] = pairs[i+1]
	}
	return out
}

// kinds lists the rendered objects as Kind/name, sorted.
func kinds(m *manifests.Manifests) []string {
	var out []string
	for _, obj := range m.Objects {
		out = append(out, obj.GetKind()+"/"+obj.GetName())
	}
	slices.Sort(out)
	return out
}

// fields reads, for each key "Kind/name {jsonpath}" of want, that field of
// that rendered object, as JSON for anything but a string; "(missing)" when
// the object or the field is not rendered.
func fields(t *testing.T, m *manifests.Manifests, want map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for key := range want {
		object, path, _ := strings.Cut(key, " ")
		kind, name, _ := strings.Cut(object, "/")
		obj, err := m.FindNamed(kind, name)
		if err != nil {
			got[key] = "(missing)"
			continue
		}
		jp := jsonpath.New(key)
		if err := jp.Parse(path); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		results, err := jp.FindResults(obj.Object)
		if err != nil || len(results) == 0 || len(results[0]) == 0 {
			got[key] = "(missing)"
			continue
		}
		var values []string
		for _, r := range results[0] {
			if s, ok := r.Interface().(string); ok {
				values = append(values, s)
				continue
			}
			b, err := yaml.Marshal(r.Interface())
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			j, err := yaml.YAMLToJSON(b)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			values = append(values, string(bytes.TrimSpace(j)))
		}
		got[key] = strings.Join(values, " ")
	}
	return got
}

// The rendered objects' names, as with config/.
const (
	deployment    = "Deployment/flyte-mpi-webhook-webhook-server"
	webhookConfig = "MutatingWebhookConfiguration/flyte-mpi-webhook-mutating-webhook-configuration"
	binding       = "MutatingAdmissionPolicyBinding/flyte-mpi-webhook-worker-command"
	container     = "{.spec.template.spec.containers[0]"
)

// denied is the start of a jsonpath to the alert on denials, 0.1.0's one alert.
const denied = `PrometheusRule/flyte-mpi-webhook {.spec.groups[0].rules[?(@.alert=="FlyteMPIJobsDenied")]`

// webhookObjects are the objects of mode webhook with generated certificates.
var webhookObjects = []string{deployment, webhookConfig,
	"PodDisruptionBudget/flyte-mpi-webhook-webhook-server", "Secret/flyte-mpi-webhook-webhook-server-cert",
	"Service/flyte-mpi-webhook-webhook-service", "ServiceAccount/flyte-mpi-webhook-webhook-server"}

// policyObjects are the admission policies of modes policy and both.
var policyObjects = []string{binding, "MutatingAdmissionPolicy/flyte-mpi-webhook-worker-command",
	"ValidatingAdmissionPolicy/flyte-mpi-webhook-warnings", "ValidatingAdmissionPolicyBinding/flyte-mpi-webhook-warnings"}

func sorted(lists ...[]string) []string {
	out := slices.Concat(lists...)
	slices.Sort(out)
	return slices.Compact(out)
}

func TestRender(t *testing.T) {
	defaultArgs := `["--cert-dir=/tmp/k8s-webhook-server/serving-certs","--port=9443","--health-probe-bind-address=:8081",` +
		`"--metrics-bind-address=:8080"`
	cases := []struct {
		name        string
		values      map[string]any
		apiVersions []string
		// objects, when set, are the rendered objects' Kind/name.
		objects []string
		// want maps "Kind/name {jsonpath}" to the field's value.
		want map[string]string
	}{{
		name:    "mode webhook, the default: the image at the chart's appVersion, certificates generated",
		values:  withImage(),
		objects: webhookObjects,
		want: map[string]string{
			deployment + " " + container + ".image}":                                          image + ":v0.1.0",
			deployment + " " + container + ".args}":                                           defaultArgs + "]",
			deployment + " {.spec.replicas}":                                                  "2",
			deployment + " {.spec.template.spec.priorityClassName}":                           "system-cluster-critical",
			deployment + " {.spec.template.spec.automountServiceAccountToken}":                "false",
			deployment + " {.spec.template.spec.volumes[0].secret.secretName}":                "flyte-mpi-webhook-webhook-server-cert",
			webhookConfig + " {.webhooks[0].failurePolicy}":                                   "Fail",
			webhookConfig + " {.webhooks[0].clientConfig.service.namespace}":                  Namespace,
			webhookConfig + " {.webhooks[0].namespaceSelector.matchExpressions}":              `[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","flyte-mpi-webhook-system"]}]`,
			webhookConfig + " {.webhooks[0].matchConditions}":                                 "(missing)",
			"Secret/flyte-mpi-webhook-webhook-server-cert {.type}":                            "kubernetes.io/tls",
			deployment + " " + container + ".env[*].name}":                                    "MEMORY_LIMIT",
			"ServiceAccount/flyte-mpi-webhook-webhook-server {.automountServiceAccountToken}": "false",
		},
	}, {
		name:   "a tag and a digest",
		values: withImage("image.tag", "v0.1.1", "image.digest", "sha256:"+strings.Repeat("ab", 32), "image.pullPolicy", "Always"),
		want: map[string]string{
			deployment + " " + container + ".image}":           image + ":v0.1.1@sha256:" + strings.Repeat("ab", 32),
			deployment + " " + container + ".imagePullPolicy}": "Always",
		},
	}, {
		name:        "mode policy: no webhook, no image needed, no parameter",
		values:      values("mode", "policy"),
		apiVersions: []string{MutatingAdmissionPolicyAPI},
		objects: sorted(policyObjects, []string{"ValidatingAdmissionPolicy/flyte-mpi-webhook-no-webhook",
			"ValidatingAdmissionPolicyBinding/flyte-mpi-webhook-no-webhook"}),
		want: map[string]string{
			binding + " {.spec.paramRef}": "(missing)",
			"MutatingAdmissionPolicy/flyte-mpi-webhook-worker-command {.spec.paramKind}": "(missing)",
		},
	}, {
		name:        "mode both: the webhook gets what the policy leaves",
		values:      withImage("mode", "both"),
		apiVersions: []string{MutatingAdmissionPolicyAPI},
		objects:     sorted(webhookObjects, policyObjects),
		want: map[string]string{
			webhookConfig + " {.webhooks[0].matchConditions[0].name}": "left-to-the-webhook-by-the-policy",
		},
	}, {
		name: "another namespace reaches every reference to it",
		values: withImage("mode", "both", "certificates.source", "certManager",
			"webhook.excludedNamespaces", []any{"kube-system", "monitoring"}),
		apiVersions: []string{MutatingAdmissionPolicyAPI, CertManagerAPI},
		want: map[string]string{
			webhookConfig + " {.metadata.annotations.cert-manager\\.io/inject-ca-from}":    Namespace + "/flyte-mpi-webhook-serving-cert",
			webhookConfig + " {.webhooks[0].clientConfig.caBundle}":                        "(missing)",
			webhookConfig + " {.webhooks[0].namespaceSelector.matchExpressions[0].values}": `["kube-system","monitoring","flyte-mpi-webhook-system"]`,
			"Certificate/flyte-mpi-webhook-serving-cert {.spec.dnsNames}": `["flyte-mpi-webhook-webhook-service.flyte-mpi-webhook-system.svc",` +
				`"flyte-mpi-webhook-webhook-service.flyte-mpi-webhook-system.svc.cluster.local"]`,
			"Certificate/flyte-mpi-webhook-serving-cert {.spec.secretName}":                                                                  "flyte-mpi-webhook-webhook-server-cert",
			"Issuer/flyte-mpi-webhook-ca-issuer {.spec.ca.secretName}":                                                                       "flyte-mpi-webhook-webhook-ca",
			"Certificate/flyte-mpi-webhook-ca {.spec.issuerRef.name}":                                                                        "flyte-mpi-webhook-selfsigned-issuer",
			"MutatingAdmissionPolicy/flyte-mpi-webhook-worker-command {.spec.matchConstraints.namespaceSelector.matchExpressions[0].values}": `["kube-system","monitoring","flyte-mpi-webhook-system"]`,
		},
	}, {
		name:    "an existing Secret and its CA",
		values:  withImage("certificates.source", "secret", "certificates.secret.name", "my-cert", "certificates.secret.caBundle", "Q0E="),
		objects: sorted(slices.DeleteFunc(slices.Clone(webhookObjects), func(s string) bool { return strings.HasPrefix(s, "Secret/") })),
		want: map[string]string{
			deployment + " {.spec.template.spec.volumes[0].secret.secretName}": "my-cert",
			webhookConfig + " {.webhooks[0].clientConfig.caBundle}":            "Q0E=",
		},
	}, {
		name:    "certificates the webhook keeps itself: an empty Secret, its flags, a token, a volume in memory, no caBundle",
		values:  withImage("certificates.source", "self", "certificates.self.caValidity", "8760h", "certificates.self.validity", "720h"),
		objects: sorted(withoutGeneratedSecret(slices.Clone(webhookObjects)), selfObjects),
		want: map[string]string{
			deployment + " " + container + ".args}": defaultArgs + `,"--cert-secret=` + Namespace + `/flyte-mpi-webhook-webhook-certs",` +
				`"--cert-webhook-configuration=flyte-mpi-webhook-mutating-webhook-configuration",` +
				`"--cert-dns-names=flyte-mpi-webhook-webhook-service.` + Namespace + `.svc,flyte-mpi-webhook-webhook-service.` + Namespace + `.svc.cluster.local",` +
				`"--cert-ca-validity=8760h","--cert-validity=720h"]`,
			deployment + " {.spec.template.spec.automountServiceAccountToken}": "true",
			deployment + " {.spec.template.spec.volumes}":                      `[{"emptyDir":{"medium":"Memory","sizeLimit":"1Mi"},"name":"cert"}]`,
			deployment + " " + container + ".volumeMounts}":                    `[{"mountPath":"/tmp/k8s-webhook-server/serving-certs","name":"cert"}]`,
			deployment + " " + container + ".readinessProbe.httpGet.path}":     "/readyz",
			webhookConfig + " {.webhooks[0].clientConfig}": `{"service":{"name":"flyte-mpi-webhook-webhook-service","namespace":"` + Namespace +
				`","path":"/mutate-mpijob"}}`,
			"Secret/flyte-mpi-webhook-webhook-certs {.type}":                                  "Opaque",
			"Secret/flyte-mpi-webhook-webhook-certs {.data}":                                  "(missing)",
			"ServiceAccount/flyte-mpi-webhook-webhook-server {.automountServiceAccountToken}": "false",
		},
	}, {
		name: "certificates the webhook keeps itself, with client certificates and a NetworkPolicy: the client CA beside them, egress to the API server",
		values: withImage("certificates.source", "self", "clientAuth.enabled", true, "networkPolicy.enabled", true,
			"networkPolicy.webhookFrom", []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}},
			"networkPolicy.apiServerTo", []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.1/32"}}}),
		want: map[string]string{
			deployment + " {.spec.template.spec.volumes[1]}": `{"configMap":{"items":[{"key":"ca.crt","path":"client-ca.crt"}],"name":"flyte-mpi-webhook-client-ca"},"name":"client-ca"}`,
			deployment + " " + container + ".volumeMounts[1]}": `{"mountPath":"/tmp/k8s-webhook-server/serving-certs/client-ca.crt","name":"client-ca",` +
				`"readOnly":true,"subPath":"client-ca.crt"}`,
			"NetworkPolicy/flyte-mpi-webhook-webhook-server {.spec.egress}": `[{"to":[{"ipBlock":{"cidr":"10.0.0.1/32"}}]}]`,
		},
	}, {
		name:   "client certificates: the flag, and the CA's ConfigMap, config/client-auth's, beside the serving certificate",
		values: withImage("clientAuth.enabled", true),
		want: map[string]string{
			deployment + " " + container + ".args}": defaultArgs + `,"--client-ca-name=client-ca.crt"]`,
			deployment + " {.spec.template.spec.volumes[0].projected.sources}": `[{"secret":{"name":"flyte-mpi-webhook-webhook-server-cert"}},` +
				`{"configMap":{"items":[{"key":"ca.crt","path":"client-ca.crt"}],"name":"flyte-mpi-webhook-client-ca"}}]`,
			deployment + " {.spec.template.spec.volumes[0].secret}": "(missing)",
		},
	}, {
		name: "client certificates of the cluster's CA for another common name, beside an existing Secret",
		values: withImage("clientAuth.enabled", true, "clientAuth.caConfigMap", "kube-root-ca.crt", "clientAuth.commonName", "kube-apiserver-kubelet-client",
			"certificates.source", "secret", "certificates.secret.name", "my-cert", "certificates.secret.caBundle", "Q0E="),
		want: map[string]string{
			deployment + " " + container + ".args}":                                      defaultArgs + `,"--client-ca-name=client-ca.crt","--client-cn-name=kube-apiserver-kubelet-client"]`,
			deployment + " {.spec.template.spec.volumes[0].projected.sources[*].*.name}": "my-cert kube-root-ca.crt",
		},
	}, {
		name:   "client certificates of any common name",
		values: withImage("clientAuth.enabled", true, "clientAuth.commonName", ""),
		want: map[string]string{
			deployment + " " + container + ".args}": defaultArgs + `,"--client-ca-name=client-ca.crt","--client-cn-name="]`,
		},
	}, {
		name: "every decision flag, and the log level",
		values: withImage("decisions.fallbackWorkerCommand", "/usr/sbin/sshd -D -o 'X=$(Y)'", "decisions.onInvalid", "warn",
			"decisions.inferWorkerCommand", false, "decisions.injectAs", "args", "decisions.containerName", "main",
			"decisions.flyteTaskSelector", "execution-id", "logLevel", "debug"),
		want: map[string]string{
			deployment + " " + container + ".args}": defaultArgs + `,"--fallback-worker-command=/usr/sbin/sshd -D -o 'X=$$(Y)'",` +
				`"--on-invalid=warn","--infer-worker-command=false","--inject-as=args","--container-name=main",` +
				`"--flyte-task-selector=execution-id","--zap-log-level=debug"]`,
		},
	}, {
		// helm upgrade --reuse-values from 0.1.0 keeps 0.1.0's default values.
		name:    "0.1.0's decisions.horovodWorkerCommand: accepted, and ignored",
		values:  withImage("decisions.horovodWorkerCommand", "/usr/sbin/sshd -De -f /home/jobuser/.sshd_config"),
		objects: webhookObjects,
		want: map[string]string{
			deployment + " " + container + ".args}": defaultArgs + "]",
		},
	}, {
		name: "the pods' settings",
		values: withImage("replicas", 3, "priorityClassName", "", "nodeSelector", map[string]any{"pool": "system"},
			"tolerations", []any{map[string]any{"key": "dedicated", "operator": "Exists"}},
			"topologySpreadConstraints", []any{map[string]any{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"team": "ml"}}}},
			"podLabels", map[string]any{"team": "ml"}, "podAnnotations", map[string]any{"note": "x"},
			"imagePullSecrets", []any{map[string]any{"name": "pull"}}, "podDisruptionBudget.minAvailable", "50%",
			"webhook.failurePolicy", "Ignore", "webhook.timeoutSeconds", 10),
		want: map[string]string{
			deployment + " {.spec.replicas}":                                            "3",
			deployment + " {.spec.template.spec.priorityClassName}":                     "(missing)",
			deployment + " {.spec.template.spec.nodeSelector}":                          `{"pool":"system"}`,
			deployment + " {.spec.template.spec.tolerations}":                           `[{"key":"dedicated","operator":"Exists"}]`,
			deployment + " {.spec.template.spec.topologySpreadConstraints}":             `[{"labelSelector":{"matchLabels":{"team":"ml"}},"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule"}]`,
			deployment + " {.spec.template.metadata.labels.team}":                       "ml",
			deployment + " {.spec.template.metadata.annotations.note}":                  "x",
			deployment + " {.spec.template.spec.imagePullSecrets}":                      `[{"name":"pull"}]`,
			"PodDisruptionBudget/flyte-mpi-webhook-webhook-server {.spec.minAvailable}": "50%",
			webhookConfig + " {.webhooks[0].failurePolicy}":                             "Ignore",
			webhookConfig + " {.webhooks[0].timeoutSeconds}":                            "10",
		},
	}, {
		// EKS with a custom CNI: the node's network; a port of one's own, which everything follows.
		name:        "the node's network and other ports",
		values:      withImage("webhook.hostNetwork", true, "webhook.port", 10260, "webhook.probePort", 10261, "webhook.metricsPort", 10262, "serviceMonitor.enabled", true),
		apiVersions: []string{PrometheusOperatorAPI},
		want: map[string]string{
			deployment + " {.spec.template.spec.hostNetwork}":                       "true",
			deployment + " {.spec.template.spec.dnsPolicy}":                         "ClusterFirstWithHostNet",
			deployment + " {.spec.strategy.rollingUpdate}":                          `{"maxSurge":0,"maxUnavailable":1}`,
			deployment + " " + container + ".ports[*].containerPort}":               "10260 10261 10262",
			deployment + " " + container + ".args[1:4]}":                            "--port=10260 --health-probe-bind-address=:10261 --metrics-bind-address=:10262",
			"Service/flyte-mpi-webhook-webhook-service {.spec.ports[0].targetPort}": "webhook-server",
			"Service/flyte-mpi-webhook-metrics {.spec.ports[0].port}":               "10262",
		},
	}, {
		name:   "by default the Pod network, on 9443",
		values: withImage(),
		want: map[string]string{
			deployment + " {.spec.template.spec.hostNetwork}":         "(missing)",
			deployment + " {.spec.template.spec.dnsPolicy}":           "(missing)",
			deployment + " {.spec.strategy}":                          "(missing)",
			deployment + " " + container + ".ports[*].containerPort}": "9443 8081 8080",
		},
	}, {
		name: "the extras: NetworkPolicy, ServiceMonitor, PrometheusRule",
		values: withImage("networkPolicy.enabled", true,
			"networkPolicy.webhookFrom", []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}},
			"networkPolicy.metricsFrom", []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"name": "monitoring"}}}},
			"serviceMonitor.enabled", true, "prometheusRule.enabled", true, "podDisruptionBudget.enabled", false),
		apiVersions: []string{PrometheusOperatorAPI},
		objects: sorted(slices.DeleteFunc(slices.Clone(webhookObjects), func(s string) bool { return strings.HasPrefix(s, "PodDisruptionBudget/") }),
			[]string{"NetworkPolicy/flyte-mpi-webhook-webhook-server", "PrometheusRule/flyte-mpi-webhook",
				"Service/flyte-mpi-webhook-metrics", "ServiceMonitor/flyte-mpi-webhook"}),
		want: map[string]string{
			"NetworkPolicy/flyte-mpi-webhook-webhook-server {.spec.ingress[*].ports[0].port}": "webhook-server metrics",
			"NetworkPolicy/flyte-mpi-webhook-webhook-server {.spec.ingress[0].from}":          `[{"ipBlock":{"cidr":"10.0.0.0/24"}}]`,
			denied + ".expr}": `sum(increase(flyte_mpi_webhook_decisions_total{outcome="denied_invalid"}[15m])) > 0` + "\n",
			denied + ".annotations.summary}": "flyte-mpi-webhook denied {{ $value }} MPIJob creations: an mpi.flyte.org/* annotation is invalid; " +
				"the reason is in the webhook's logs and in the Flyte execution's error",
			"ServiceMonitor/flyte-mpi-webhook {.spec.endpoints[0].port}": "metrics",
		},
	}, {
		// The webhook calls nothing: no API server (its manager has an empty
		// rest.Config and the pods no token), no DNS, certificates from files.
		name: "an enabled NetworkPolicy denies all egress",
		values: withImage("networkPolicy.enabled", true,
			"networkPolicy.webhookFrom", []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}}),
		want: map[string]string{
			"NetworkPolicy/flyte-mpi-webhook-webhook-server {.spec.policyTypes}":              `["Ingress","Egress"]`,
			"NetworkPolicy/flyte-mpi-webhook-webhook-server {.spec.egress}":                   "(missing)",
			"NetworkPolicy/flyte-mpi-webhook-webhook-server {.spec.podSelector}":              `{"matchLabels":{"app.kubernetes.io/instance":"flyte-mpi-webhook","app.kubernetes.io/name":"flyte-mpi-webhook"}}`,
			"NetworkPolicy/flyte-mpi-webhook-webhook-server {.spec.ingress[*].ports[0].port}": "webhook-server",
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Render(tc.values, tc.apiVersions...)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if tc.objects != nil {
				if diff := cmp.Diff(tc.objects, kinds(m)); diff != "" {
					t.Errorf("objects (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tc.want, fields(t, m, tc.want)); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRenderRefuses holds the chart to refusing wrong values, before
// anything is installed, with a message that names the value.
func TestRenderRefuses(t *testing.T) {
	cases := []struct {
		name        string
		values      map[string]any
		apiVersions []string
		// want are substrings of the error.
		want []string
	}{
		{name: "no image", values: values(),
			want: []string{"image.repository is required with mode=webhook", "--set image.repository="}},
		{name: "no image, mode both", values: values("mode", "both"), apiVersions: []string{MutatingAdmissionPolicyAPI},
			want: []string{"image.repository is required with mode=both"}},
		{name: "mode policy on a cluster without MutatingAdmissionPolicy", values: values("mode", "policy"),
			want: []string{"mode=policy needs admissionregistration.k8s.io/v1 MutatingAdmissionPolicy", "from 1.36", "v1.37.2"}},
		{name: "a mode that is none", values: withImage("mode", "policies"),
			want: []string{"/mode", "webhook", "policy", "both"}},
		{name: "a value of the wrong type", values: withImage("replicas", "two"), want: []string{"replicas", "integer"}},
		{name: "a misspelt value", values: withImage("replica", 3), want: []string{"replica"}},
		{name: "a misspelt nested value", values: withImage("webhook.failurepolicy", "Ignore"), want: []string{"failurepolicy"}},
		{name: "a failurePolicy that is none", values: withImage("webhook.failurePolicy", "fail"), want: []string{"failurePolicy", "Fail", "Ignore"}},
		{name: "the kubelet's port on the node's network", values: withImage("webhook.hostNetwork", true, "webhook.port", 10250),
			want: []string{"webhook.port=10250 with webhook.hostNetwork", "kubelet"}},
		{name: "the kubelet's port for the metrics on the node's network", values: withImage("webhook.hostNetwork", true, "webhook.metricsPort", 10250),
			want: []string{"webhook.metricsPort=10250 with webhook.hostNetwork"}},
		{name: "the webhook and the probes on one port", values: withImage("webhook.port", 8081),
			want: []string{"webhook.port and webhook.probePort are both 8081"}},
		{name: "a port a non-root process cannot bind", values: withImage("webhook.port", 443), want: []string{"webhook/port", "minimum"}},
		{name: "a timeout past 30 s", values: withImage("webhook.timeoutSeconds", 31), want: []string{"timeoutSeconds"}},
		{name: "a digest that is none", values: withImage("image.digest", "abc"), want: []string{"digest"}},
		{name: "an onInvalid that is none", values: withImage("decisions.onInvalid", "allow"), want: []string{"onInvalid", "deny", "warn"}},
		{name: "a certificate source that is none", values: withImage("certificates.source", "vault"), want: []string{"source", "generate"}},
		{name: "a Secret without its name", values: withImage("certificates.source", "secret", "certificates.secret.caBundle", "Q0E="),
			want: []string{"certificates.secret.name is required"}},
		{name: "a Secret without its CA", values: withImage("certificates.source", "secret", "certificates.secret.name", "c"),
			want: []string{"certificates.secret.caBundle is required"}},
		{name: "a serving certificate the webhook keeps for less than 5m", values: withImage("certificates.source", "self", "certificates.self.validity", "4m"),
			want: []string{"certificates.self.validity=4m: at least 5m"}},
		{name: "a CA the webhook keeps for less than its serving certificate", values: withImage("certificates.source", "self", "certificates.self.caValidity", "90m",
			"certificates.self.validity", "2h"), want: []string{"certificates.self.caValidity=90m is shorter than certificates.self.validity=2h"}},
		{name: "a validity that is no duration the chart reads", values: withImage("certificates.source", "self", "certificates.self.validity", "1y"),
			want: []string{"certificates/self/validity", "1y"}},
		{name: "a misspelt value of self", values: withImage("certificates.source", "self", "certificates.self.validityDays", 30),
			want: []string{"validityDays"}},
		{name: "a NetworkPolicy that lets the webhook reach no API server", values: withImage("certificates.source", "self", "networkPolicy.enabled", true,
			"networkPolicy.webhookFrom", []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}}),
			want: []string{"networkPolicy.apiServerTo is required with networkPolicy.enabled and certificates.source=self"}},
		{name: "cert-manager on a cluster without it", values: withImage("certificates.source", "certManager"),
			want: []string{"certificates.source=certManager needs cert-manager"}},
		{name: "a policy with a flag it does not implement", values: withImage("mode", "both", "decisions.injectAs", "args"),
			apiVersions: []string{MutatingAdmissionPolicyAPI}, want: []string{`decisions.injectAs="args"`, "mode=both"}},
		{name: "a policy without inference", values: values("mode", "policy", "decisions.inferWorkerCommand", false),
			apiVersions: []string{MutatingAdmissionPolicyAPI}, want: []string{"decisions.inferWorkerCommand=false", "mode=policy"}},
		{name: "client certificates with no webhook", values: values("mode", "policy", "clientAuth.enabled", true),
			apiVersions: []string{MutatingAdmissionPolicyAPI}, want: []string{"clientAuth.enabled: mode=policy runs no webhook"}},
		{name: "a client CA ConfigMap that is no name", values: withImage("clientAuth.enabled", true, "clientAuth.caConfigMap", "Client_CA"),
			want: []string{"clientAuth/caConfigMap", "Client_CA"}},
		{name: "a common name with a newline", values: withImage("clientAuth.enabled", true, "clientAuth.commonName", "kube-apiserver\n"),
			want: []string{"clientAuth/commonName"}},
		{name: "a common name past X.509's 64 characters", values: withImage("clientAuth.commonName", strings.Repeat("k", 65)),
			want: []string{"clientAuth/commonName", "64"}},
		{name: "a PodDisruptionBudget that keeps both replicas", values: withImage("podDisruptionBudget.minAvailable", 2),
			want: []string{"podDisruptionBudget.minAvailable=2 keeps all 2 replicas running", "every node drain would wait"}},
		{name: "a PodDisruptionBudget that keeps 100% of the replicas", values: withImage("replicas", 3, "podDisruptionBudget.minAvailable", "100%"),
			want: []string{"podDisruptionBudget.minAvailable=100% keeps all 3 replicas running"}},
		{name: "a PodDisruptionBudget whose percentage rounds up to every replica", values: withImage("podDisruptionBudget.minAvailable", "51%"),
			want: []string{"podDisruptionBudget.minAvailable=51% keeps all 2 replicas running"}},
		{name: "a NetworkPolicy that names no API server", values: withImage("networkPolicy.enabled", true),
			want: []string{"networkPolicy.webhookFrom is required"}},
		{name: "a ServiceMonitor without the prometheus-operator", values: withImage("serviceMonitor.enabled", true),
			want: []string{"serviceMonitor.enabled needs the prometheus-operator"}},
		{name: "a ServiceMonitor with no webhook", values: values("mode", "policy", "serviceMonitor.enabled", true),
			apiVersions: []string{MutatingAdmissionPolicyAPI, PrometheusOperatorAPI}, want: []string{"serviceMonitor.enabled: mode=policy runs no webhook"}},
		{name: "alerts on a scrape job nothing makes", values: withImage("prometheusRule.enabled", true),
			apiVersions: []string{PrometheusOperatorAPI}, want: []string{"prometheusRule.enabled without serviceMonitor.enabled", "prometheusRule.scrapeJob"}},
		{name: "a runbook URL that is none", values: withImage("prometheusRule.runbookURL", "docs/RUNBOOKS.md"),
			want: []string{"prometheusRule/runbookURL"}},
		{name: "a dashboard the sidecar cannot find", values: withImage("grafanaDashboard.enabled", true, "grafanaDashboard.labels.grafana_dashboard", nil),
			want: []string{"grafanaDashboard.labels is empty", "grafana_dashboard"}},
		{name: "a dashboard in a namespace that is no name", values: withImage("grafanaDashboard.enabled", true, "grafanaDashboard.namespace", "Monitoring"),
			want: []string{"grafanaDashboard/namespace", "Monitoring"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(tc.values, tc.apiVersions...)
			if err == nil {
				t.Fatalf("Render succeeded; want an error with %q", tc.want)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestRenderWithValuesThatLackClientAuth renders the chart with values that
// have no clientAuth, as `helm upgrade --reuse-values` from 0.1.0 (which had
// none) renders it with 0.1.0's values instead of this chart's: off, and,
// with clientAuth.enabled alone set, config/client-auth's ConfigMap and the
// common name kube-apiserver, never any certificate the CA signed.
func TestRenderWithValuesThatLackClientAuth(t *testing.T) {
	dir := chartWithoutValues(t, "clientAuth")
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   map[string]string
	}{
		{name: "no clientAuth: off", values: withImage(), want: map[string]string{
			deployment + " " + container + ".args[4]}":                         "(missing)",
			deployment + " {.spec.template.spec.volumes[0].secret.secretName}": "flyte-mpi-webhook-webhook-server-cert",
		}},
		{name: "clientAuth.enabled alone", values: withImage("clientAuth.enabled", true), want: map[string]string{
			deployment + " " + container + ".args[4:]}":                                          "--client-ca-name=client-ca.crt",
			deployment + " {.spec.template.spec.volumes[0].projected.sources[1].configMap.name}": "flyte-mpi-webhook-client-ca",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := RenderChart(dir, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, fields(t, m, tc.want)); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRenderGeneratesOneCertificate checks that the caBundle trusts the CA in
// the generated Secret, and that the serving certificate names the Service.
func TestRenderGeneratesOneCertificate(t *testing.T) {
	m, err := Render(withImage())
	if err != nil {
		t.Fatal(err)
	}
	got := fields(t, m, map[string]string{
		"Secret/flyte-mpi-webhook-webhook-server-cert {.data.ca\\.crt}":  "",
		webhookConfig + " {.webhooks[0].clientConfig.caBundle}":          "",
		"Secret/flyte-mpi-webhook-webhook-server-cert {.data.tls\\.crt}": "",
	})
	ca, caBundle := got["Secret/flyte-mpi-webhook-webhook-server-cert {.data.ca\\.crt}"], got[webhookConfig+" {.webhooks[0].clientConfig.caBundle}"]
	if ca == "" || ca != caBundle {
		t.Fatalf("the caBundle is not the Secret's ca.crt:\ncaBundle %.40s...\nca.crt   %.40s...", caBundle, ca)
	}
	if err := verifyServing(ca, got["Secret/flyte-mpi-webhook-webhook-server-cert {.data.tls\\.crt}"],
		fmt.Sprintf("flyte-mpi-webhook-webhook-service.%s.svc", Namespace)); err != nil {
		t.Fatal(err)
	}
}

// TestRenderKubeVersion holds the chart's kubeVersion to the oldest
// Kubernetes that make test-versions runs: on 1.31 Helm refuses it with its
// own message, from 1.32 on it renders, managed clusters' versions included.
func TestRenderKubeVersion(t *testing.T) {
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version string
		renders bool
	}{
		{"v1.31.0", false},
		{"v1.31.14-eks-3abbec1", false},
		{"v1.32.0", true},
		{"v1.32.9-eks-113cf36", true},
		{"v1.34.1-gke.1829001", true},
		{KubeVersion.Version, true},
	} {
		t.Run(tc.version, func(t *testing.T) {
			kubeVersion, err := chartutil.ParseKubeVersion(tc.version)
			if err != nil {
				t.Fatal(err)
			}
			_, err = renderOn(kubeVersion, ReleaseName, dir, withImage())
			switch {
			case tc.renders && err != nil:
				t.Errorf("does not render on %s: %v", tc.version, err)
			case !tc.renders && (err == nil || !strings.Contains(err.Error(), "chart requires kubeVersion: >=1.32.0-0 which is incompatible with Kubernetes v1.31")):
				t.Errorf("on %s: %v; want Helm's kubeVersion refusal", tc.version, err)
			}
		})
	}
}

// TestRenderNeverBlocksADrain holds the PodDisruptionBudget to letting a node
// drain evict a webhook pod: with one replica there is none (minAvailable 1
// would refuse every eviction of it, and the drain would wait for ever), with
// more it keeps fewer pods than there are replicas. A PodDisruptionBudget
// allows replicas - minAvailable disruptions (a percentage rounded up).
func TestRenderNeverBlocksADrain(t *testing.T) {
	const pdb = "PodDisruptionBudget/flyte-mpi-webhook-webhook-server"
	for _, tc := range []struct {
		name   string
		values map[string]any
		// minAvailable is the PodDisruptionBudget's, "(missing)" for none.
		minAvailable string
		// allowed is how many of the replicas a drain may evict at once.
		allowed int
	}{
		{name: "the default, 2 replicas: one may go", values: withImage(), minAvailable: "1", allowed: 1},
		{name: "1 replica: no PodDisruptionBudget", values: withImage("replicas", 1), minAvailable: "(missing)", allowed: 1},
		{name: "1 replica, minAvailable 1 asked for: none still", values: withImage("replicas", 1, "podDisruptionBudget.minAvailable", 1),
			minAvailable: "(missing)", allowed: 1},
		{name: "3 replicas, 50%: one may go", values: withImage("replicas", 3, "podDisruptionBudget.minAvailable", "50%"), minAvailable: "50%", allowed: 1},
		{name: "2 replicas, none kept", values: withImage("podDisruptionBudget.minAvailable", 0), minAvailable: "0", allowed: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Render(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			got := fields(t, m, map[string]string{
				pdb + " {.spec.minAvailable}":    "",
				deployment + " {.spec.replicas}": "",
			})
			if diff := cmp.Diff(tc.minAvailable, got[pdb+" {.spec.minAvailable}"]); diff != "" {
				t.Errorf("the PodDisruptionBudget's minAvailable (-want +got):\n%s", diff)
			}
			replicas, err := strconv.Atoi(got[deployment+" {.spec.replicas}"])
			if err != nil {
				t.Fatal(err)
			}
			allowed := replicas
			if minAvailable := tc.minAvailable; minAvailable != "(missing)" {
				value := intstr.Parse(minAvailable)
				kept, err := intstr.GetScaledValueFromIntOrPercent(&value, replicas, true)
				if err != nil {
					t.Fatal(err)
				}
				allowed = replicas - kept
			}
			if allowed != tc.allowed || allowed < 1 {
				t.Errorf("a drain may evict %d of %d replicas at once, want %d (and never none)", allowed, replicas, tc.allowed)
			}
		})
	}
}

// chartWithoutValues copies the chart into a temporary directory with the
// top-level block key removed from its values.yaml, as a release made before
// the block existed holds its values, and returns the copy's directory.
func chartWithoutValues(t *testing.T, key string) string {
	t.Helper()
	dir := copyChart(t)
	chartValues, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(chartValues, []byte("\n"+key+":\n"))
	if start < 0 {
		t.Fatalf("values.yaml: no %s block to remove", key)
	}
	end := bytes.Index(chartValues[start+1:], []byte("\n\n"))
	if end < 0 {
		t.Fatalf("values.yaml: no empty line after the %s block", key)
	}
	if err := os.WriteFile(filepath.Join(dir, "values.yaml"), slices.Delete(chartValues, start, start+1+end), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}
