package cluster_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// The Prometheus the alert specs start, Debian's, on the loopback of the cluster's network namespace.
const (
	prometheusAddress = "127.0.0.1:9091"
	// scrapeInterval is how often it scrapes and evaluates the rules: shorter than a
	// ServiceMonitor's default 30 s, so that a spec waits for the rules' for: and windows, not for scrapes.
	scrapeInterval = 5 * time.Second
	// alertTimeout bounds the wait for an alert to fire or resolve: the longest for: (2m) and
	// window (2m) with room for the scrapes and the kubelet's Secret sync.
	alertTimeout = 5 * time.Minute
	// metricsJob is the scrape job of the chart's ServiceMonitor for release (its metrics Service's
	// name), which FlyteMPIWebhookDown watches.
	metricsJob = release + "-metrics"
	// kubeVersion is the cluster's, which helm template cannot ask of it.
	kubeVersion = "1.37.2"
)

// prometheus is a Prometheus the suite runs, with the chart's PrometheusRule's groups as its rule
// file, scraping the API server and the webhook's Pods as the chart's ServiceMonitor would.
type prometheus struct {
	cmd *exec.Cmd
	dir string
	// targets is what writeTargets wrote last.
	targets       []byte
	stopDiscovery context.CancelFunc
	discovered    sync.WaitGroup
}

// writeTargets writes the webhook's metrics endpoints, as the metrics Service's endpoints list them
// (its pods with an address, not terminating), to the file Prometheus discovers its targets in.
func (p *prometheus) writeTargets(ctx context.Context) {
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(webhookNamespace),
		client.MatchingLabels{"app.kubernetes.io/instance": release}); err != nil {
		return // the next tick tries again
	}
	groups := []map[string]any{}
	for _, pod := range pods.Items {
		if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
			continue
		}
		port := 8080
		for _, c := range pod.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == "metrics" {
					port = int(cp.ContainerPort)
				}
			}
		}
		groups = append(groups, map[string]any{
			"targets": []string{net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))},
			"labels":  map[string]string{"namespace": pod.Namespace, "pod": pod.Name},
		})
	}
	raw, err := json.Marshal(groups)
	Expect(err).NotTo(HaveOccurred())
	if bytes.Equal(raw, p.targets) {
		return
	}
	tmp := filepath.Join(p.dir, "targets.json.tmp")
	Expect(os.WriteFile(tmp, raw, 0o600)).To(Succeed())
	Expect(os.Rename(tmp, filepath.Join(p.dir, "targets.json"))).To(Succeed())
	p.targets = raw
}

// startPrometheus renders the chart's PrometheusRule with helm template, for the installed release,
// writes its groups and a scrape configuration, and starts Prometheus on them.
func startPrometheus(ctx context.Context) *prometheus {
	GinkgoHelper()
	binary, err := exec.LookPath("prometheus")
	Expect(err).NotTo(HaveOccurred(), "Debian's prometheus package: make test-cluster installs it")
	dir := GinkgoT().TempDir()

	rendered := run(ctx, time.Minute, helmBinary, "template", release, filepath.Join(releaseDir, chartFile()),
		"--namespace", webhookNamespace, "--kube-version", kubeVersion, "--api-versions", "monitoring.coreos.com/v1",
		"--set", "image.repository="+imageRepository(), "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
		"--show-only", "templates/prometheus/prometheusrule.yaml")
	var rule struct {
		Spec map[string]any `json:"spec"`
	}
	Expect(yaml.Unmarshal([]byte(rendered), &rule)).To(Succeed())
	Expect(rule.Spec).To(HaveKey("groups"))
	rules, err := yaml.Marshal(rule.Spec)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600)).To(Succeed())

	cfg, err := config.GetConfig()
	Expect(err).NotTo(HaveOccurred())
	Expect(cfg.CAFile).NotTo(BeEmpty(), "the cluster's kubeconfig names its CA file")
	scrape := map[string]any{
		"global":     map[string]any{"scrape_interval": scrapeInterval.String(), "evaluation_interval": scrapeInterval.String()},
		"rule_files": []string{"rules.yaml"},
		"scrape_configs": []any{
			map[string]any{
				"job_name": "apiserver", "scheme": "https",
				"tls_config":     map[string]any{"ca_file": cfg.CAFile, "cert_file": cfg.CertFile, "key_file": cfg.KeyFile},
				"static_configs": []any{map[string]any{"targets": []string{strings.TrimPrefix(cfg.Host, "https://")}}},
			},
			// What the prometheus-operator makes of the chart's ServiceMonitor: a job named after
			// its Service, whose targets are the Service's endpoints. Debian's Prometheus is built
			// without Kubernetes service discovery, so the suite writes them (writeTargets).
			map[string]any{
				"job_name":        metricsJob,
				"file_sd_configs": []any{map[string]any{"files": []string{filepath.Join(dir, "targets.json")}, "refresh_interval": scrapeInterval.String()}},
			},
		},
	}
	raw, err := yaml.Marshal(scrape)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "prometheus.yml"), raw, 0o600)).To(Succeed())
	run(ctx, time.Minute, "promtool", "check", "config", filepath.Join(dir, "prometheus.yml"))

	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(binary, "--config.file", filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", prometheusAddress)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &prometheus{cmd: cmd, dir: dir}
	p.writeTargets(ctx)
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(p.stop)
	discovery, stopDiscovery := context.WithCancel(context.Background())
	p.stopDiscovery = stopDiscovery
	p.discovered.Add(1)
	go func() {
		defer GinkgoRecover()
		defer p.discovered.Done()
		ticker := time.NewTicker(poll)
		defer ticker.Stop()
		for {
			select {
			case <-discovery.Done():
				return
			case <-ticker.C:
				p.writeTargets(discovery)
			}
		}
	}()
	// Up when it has scraped both jobs once.
	Eventually(ctx, func(g Gomega) {
		for _, job := range []string{"apiserver", metricsJob} {
			g.Expect(p.query(ctx, g, fmt.Sprintf(`up{job=%q} == 1`, job))).NotTo(BeEmpty(), "job %s not up", job)
		}
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	return p
}

// stop ends Prometheus, by its PID, and prints its log on failure.
func (p *prometheus) stop() {
	if p.stopDiscovery != nil {
		p.stopDiscovery()
	}
	p.discovered.Wait()
	Expect(p.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	_ = p.cmd.Wait()
	if CurrentSpecReport().Failed() {
		log, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
		fmt.Fprintf(GinkgoWriter, "prometheus's log:\n%s\n", log)
	}
}

// get reads Prometheus' API at path into out.
func (p *prometheus) get(ctx context.Context, g Gomega, path string, out any) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+prometheusAddress+path, nil)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), path)
	g.Expect(json.NewDecoder(resp.Body).Decode(out)).To(Succeed())
}

// query returns the series of an instant query.
func (p *prometheus) query(ctx context.Context, g Gomega, expr string) []any {
	var answer struct {
		Data struct {
			Result []any `json:"result"`
		} `json:"data"`
	}
	p.get(ctx, g, "/api/v1/query?query="+url.QueryEscape(expr), &answer)
	return answer.Data.Result
}

// firing returns the names of the alerts that are firing.
func (p *prometheus) firing(ctx context.Context, g Gomega) []string {
	var answer struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	p.get(ctx, g, "/api/v1/alerts", &answer)
	var names []string
	for _, a := range answer.Data.Alerts {
		if a.State == "firing" {
			names = append(names, a.Labels["alertname"])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// awaitFiring waits until alert fires, and reports how long after the fault, since, it did.
func (p *prometheus) awaitFiring(ctx context.Context, alert string, since time.Time) {
	GinkgoHelper()
	p.await(ctx, alert, ContainElement(alert), since, "fired", "the fault")
}

// awaitResolved waits until alert no longer fires, and reports how long after the mend, since, it did.
func (p *prometheus) awaitResolved(ctx context.Context, alert string, since time.Time) {
	GinkgoHelper()
	p.await(ctx, alert, Not(ContainElement(alert)), since, "resolved", "the fault ended")
}

// await waits until the firing alerts match firing, and reports how long after since they did.
func (p *prometheus) await(ctx context.Context, alert string, firing types.GomegaMatcher, since time.Time, did, after string) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) { g.Expect(p.firing(ctx, g)).To(firing) }).
		WithTimeout(alertTimeout).WithPolling(poll).Should(Succeed(), "%s never %s", alert, did)
	took := time.Since(since).Round(time.Second)
	fmt.Fprintf(GinkgoWriter, "alert %s %s %s after %s\n", alert, did, took, after)
	AddReportEntry(alert+" "+did+" after", took.String())
}

// expectNoneFiring checks that no alert fires: the faults start from a healthy webhook.
func (p *prometheus) expectNoneFiring(ctx context.Context) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) { g.Expect(p.firing(ctx, g)).To(BeEmpty()) }).
		WithTimeout(alertTimeout).WithPolling(poll).Should(Succeed())
}

// expectAdmittedWithCommand creates a Flyte job in ns until one is admitted, and checks it was fixed.
func expectAdmittedWithCommand(ctx context.Context, ns, name string) {
	GinkgoHelper()
	job := suspendedFlyteJob("v1", ns, name)
	Eventually(ctx, func() error { return k8sClient.Create(ctx, job) }).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	Expect(workerContainer(job)).To(HaveKeyWithValue("command", ConsistOf(toAny(fixtures.SSHD)...)))
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// expectRefusedNamingWebhook checks that some creations were refused, each with the API server's
// error naming the webhook, as Flyte shows it, and returns those errors.
func expectRefusedNamingWebhook(outcomes []creation) []string {
	GinkgoHelper()
	var refused []string
	for _, o := range outcomes {
		if o.err != nil {
			refused = append(refused, o.err.Error())
		}
	}
	Expect(refused).NotTo(BeEmpty())
	fmt.Fprintf(GinkgoWriter, "%d creates refused, the first: %s\n", len(refused), refused[0])
	Expect(refused).To(HaveEach(ContainSubstring(`failed calling webhook "` + webhookName + `"`)))
	return refused
}

// blockCalls adds, in the node's network namespace where the suite runs, a rule that drops the
// API server's packets to the webhook's port on the Pods' network, as a firewall between the
// control plane and the nodes does; the returned func removes it, once however often it is called.
func blockCalls(ctx context.Context) func() {
	GinkgoHelper()
	rule := []string{"OUTPUT", "-p", "tcp", "-d", podCIDR, "--dport", "9443", "-m", "comment", "--comment", "flyte-mpi-webhook alert spec", "-j", "DROP"}
	run(ctx, time.Minute, "iptables", append([]string{"-I"}, rule...)...)
	return sync.OnceFunc(func() { run(context.Background(), time.Minute, "iptables", append([]string{"-D"}, rule...)...) })
}

// servingSecret writes the kubernetes.io/tls Secret name of the webhook's namespace with cert.
func servingSecret(ctx context.Context, name string, cert *fixtures.ServingCert) {
	GinkgoHelper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: webhookNamespace}, Type: corev1.SecretTypeTLS}
	_, err := controllerutil.CreateOrUpdate(ctx, k8sClient, secret, func() error {
		secret.Data = map[string][]byte{corev1.TLSCertKey: cert.CertPEM, corev1.TLSPrivateKeyKey: cert.KeyPEM}
		return nil
	})
	Expect(err).NotTo(HaveOccurred())
}

// alertSpecs are the faults of docs/RUNBOOKS.md, each while Flyte MPIJobs are created, with the
// chart's alerts in a real Prometheus: each alert fires, and resolves once the fault is mended.
func alertSpecs() {
	var p *prometheus
	BeforeAll(func(ctx SpecContext) {
		p = startPrometheus(ctx)
		p.expectNoneFiring(ctx)
	})

	It("scaled to zero: the creates are refused, naming the webhook, and FlyteMPIWebhookCallsFailing and FlyteMPIWebhookDown fire; "+
		"scaled back, both resolve and the creates are admitted with their worker command", func(ctx SpecContext) {
		ns := namespace(ctx)
		jobs := startCreating(ns)
		DeferCleanup(jobs.finish)
		fault := time.Now()
		scale(ctx, 0)
		// Gone, not only terminating: a terminating replica keeps serving through
		// its drain (--shutdown-drain), and the API server may still call it.
		Eventually(ctx, func(g Gomega) { g.Expect(webhookPods(ctx, g)).To(BeEmpty()) }).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
		p.awaitFiring(ctx, "FlyteMPIWebhookCallsFailing", fault)
		p.awaitFiring(ctx, "FlyteMPIWebhookDown", fault)
		refused := expectRefusedNamingWebhook(jobs.finish())
		Expect(refused).To(ContainElement(ContainSubstring(`no endpoints available for service "` + release + `-webhook-service"`)))

		mended := time.Now()
		scale(ctx, replicas)
		awaitBothReplicas(ctx)
		expectAdmittedWithCommand(ctx, ns, "admitted")
		p.awaitResolved(ctx, "FlyteMPIWebhookDown", mended)
		p.awaitResolved(ctx, "FlyteMPIWebhookCallsFailing", mended)
	})

	It("with the API server's calls to the webhook's port dropped on the way: the creates time out, "+
		"FlyteMPIWebhookCallsFailing fires; the rule removed, they are admitted", func(ctx SpecContext) {
		ns := namespace(ctx)
		jobs := startCreating(ns)
		DeferCleanup(jobs.finish)
		fault := time.Now()
		unblock := blockCalls(ctx)
		DeferCleanup(unblock)
		p.awaitFiring(ctx, "FlyteMPIWebhookCallsFailing", fault)
		unblock()
		expectRefusedNamingWebhook(jobs.finish())
		// Its resolution, the same 2-minute window as when scaled back, is not awaited again.
		expectAdmittedWithCommand(ctx, ns, "admitted")
	})

	It("serving a certificate that expires in 7 days (certificates.source secret): FlyteMPIWebhookCertificateExpiresSoon fires; "+
		"renewed in the Secret, it resolves with no create refused", func(ctx SpecContext) {
		ca, err := fixtures.NewAuthority()
		Expect(err).NotTo(HaveOccurred())
		service := release + "-webhook-service"
		names := []string{service + "." + webhookNamespace + ".svc", service + "." + webhookNamespace + ".svc.cluster.local"}
		shortLived, err := ca.IssueECDSAFor(7*24*time.Hour, names...)
		Expect(err).NotTo(HaveOccurred())
		const secret = "alert-spec-serving-cert"
		servingSecret(ctx, secret, shortLived)
		fault := time.Now()
		helmUpgrade(ctx, "certificates.source=secret,certificates.secret.name="+secret+
			",certificates.secret.caBundle="+base64.StdEncoding.EncodeToString(ca.CertPEM))
		awaitBothReplicas(ctx)
		p.awaitFiring(ctx, "FlyteMPIWebhookCertificateExpiresSoon", fault)

		jobs := startCreating(namespace(ctx))
		DeferCleanup(jobs.finish)
		renewed, err := ca.IssueECDSAFor(90*24*time.Hour, names...)
		Expect(err).NotTo(HaveOccurred())
		mended := time.Now()
		servingSecret(ctx, secret, renewed)
		p.awaitResolved(ctx, "FlyteMPIWebhookCertificateExpiresSoon", mended)
		expectAllAdmittedWithCommand(jobs.finish())

		helmUpgrade(ctx, "certificates.source=generate")
		awaitBothReplicas(ctx)
	})
}
