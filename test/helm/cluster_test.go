package helm

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// crdEnv names, per MPIJob version, the environment variable that holds the
// path of its CRD in the module cache; the Makefile sets them.
var crdEnv = map[string]string{"v1": "MPIJOB_CRD_V1", "v2beta1": "MPIJOB_CRD_V2BETA1"}

// cluster is envtest's API server with the MPIJob CRD of one version, as a
// cluster without nodes: no kubelet runs the chart's pods, so runWebhook
// runs the webhook as the Deployment would, and the API server reaches the
// chart's Service through connectProxy, its egress for the cluster's network.
type cluster struct {
	version    string
	client     client.Client
	restConfig *rest.Config
	kubeconfig string
	proxy      *connectProxy
	// hooks runs the chart's hooks, as the kubelet and the Job controller would.
	hooks *hookRunner
}

// startCluster starts an API server for the MPIJobs of version, with the
// namespace the tests create them in, stopped when t ends.
func startCluster(t *testing.T, version string) *cluster {
	t.Helper()
	crd := os.Getenv(crdEnv[version])
	if crd == "" || os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatalf("%s and KUBEBUILDER_ASSETS are not set: run `make test-chart`, which finds the CRD and the API server", crdEnv[version])
	}
	dir := t.TempDir()
	proxy, err := startConnectProxy(filepath.Join(dir, "egress.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.stop)
	// The API server sends what it sends to Services (webhooks among it)
	// through this egress: the proxy, which has the one route to the webhook.
	egress := filepath.Join(dir, "egress-selector.yaml")
	if err := os.WriteFile(egress, []byte(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: `+proxy.address()+`
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{crd}},
		ErrorIfCRDPathMissing: true,
		// DEBUG_APISERVER=1 shows why an API server does not start.
		AttachControlPlaneOutput: os.Getenv("DEBUG_APISERVER") != "",
	}
	env.ControlPlane.GetAPIServer().Configure().Set("egress-selector-config-file", egress)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest (KUBEBUILDER_ASSETS=%q): %v", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	c := &cluster{version: version, proxy: proxy, kubeconfig: filepath.Join(dir, "kubeconfig"), restConfig: cfg}
	if c.client, err = client.New(cfg, client.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: jobsNamespace}}
	if err := c.client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	c.hooks = startHookRunner(t, c)
	return c
}

// connectProxy is an HTTP CONNECT proxy, on a Unix socket, that sends every
// connection to one target, the webhook runWebhook started, whatever address
// the API server asks for; it records the addresses asked for. (The API
// server's HTTP CONNECT over TCP needs mutual TLS; over a Unix socket, none.)
type connectProxy struct {
	listener net.Listener
	server   *http.Server

	mu      sync.Mutex
	target  string
	connect []string
}

func startConnectProxy(socket string) (*connectProxy, error) {
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	p := &connectProxy{listener: l}
	p.server = &http.Server{Handler: http.HandlerFunc(p.serveConnect), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

func (p *connectProxy) address() string { return p.listener.Addr().String() }

func (p *connectProxy) stop() { _ = p.server.Close() }

// route sends the connections from now on to target ("" refuses them).
func (p *connectProxy) route(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// asked returns the addresses the API server has asked for, in order.
func (p *connectProxy) asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.connect)
}

func (p *connectProxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	p.mu.Lock()
	target := p.target
	p.connect = append(p.connect, r.Host)
	p.mu.Unlock()
	if target == "" {
		http.Error(w, "no webhook runs", http.StatusServiceUnavailable)
		return
	}
	upstream, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	conn, buffered, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = conn.Close()
		_ = upstream.Close()
		return
	}
	go func() {
		defer upstream.Close()
		defer conn.Close()
		// What the client sent after the CONNECT line, then the rest.
		_, _ = io.Copy(upstream, io.MultiReader(io.LimitReader(buffered, int64(buffered.Reader.Buffered())), conn))
	}()
	go func() {
		defer upstream.Close()
		defer conn.Close()
		_, _ = io.Copy(conn, upstream)
	}()
}

var (
	buildWebhookOnce sync.Once
	webhookBinary    string
	buildWebhookErr  error
)

// buildWebhook builds the work tree's cmd/webhook once per test binary,
// through Go's build cache.
func buildWebhook(t *testing.T) string {
	t.Helper()
	buildWebhookOnce.Do(func() {
		root, err := fixtures.RepoRoot()
		if err != nil {
			buildWebhookErr = err
			return
		}
		webhookBinary, buildWebhookErr = goBuildWebhook(root)
	})
	if buildWebhookErr != nil {
		t.Fatal(buildWebhookErr)
	}
	return webhookBinary
}

// goBuildWebhook builds cmd/webhook of the module in root into a temporary
// directory, which TestMain removes, and returns the binary's path.
func goBuildWebhook(root string) (string, error) {
	dir, err := testTempDir("chart-webhook-")
	if err != nil {
		return "", err
	}
	binary := filepath.Join(dir, "webhook")
	cmd := exec.Command("go", "build", "-o", binary, "./cmd/webhook")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/webhook in %s: %w\n%s", root, err, out)
	}
	return binary, nil
}

var (
	tempDirsMu sync.Mutex
	tempDirs   []string
)

// testTempDir makes a temporary directory that outlives one test, for what
// the test binary builds once; TestMain removes it.
func testTempDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	tempDirsMu.Lock()
	defer tempDirsMu.Unlock()
	tempDirs = append(tempDirs, dir)
	return dir, nil
}

// runWebhook does what a kubelet would do with the chart's Deployment in
// namespace: it runs the webhook binary (buildWebhook's, or an older
// release's) with the container's args, the
// $(VAR)s expanded from its env and the ConfigMap, the memory limit in its
// env, and the serving certificate of the Secret the pods mount, and routes
// the API server's calls to it. The listening addresses are the test's own.
// It returns once the webhook is ready; the process ends when t does, or at
// the stop it returns.
func (c *cluster) runWebhook(ctx context.Context, t *testing.T, namespace, binary string) (stop func()) {
	t.Helper()
	deployment := &appsv1.Deployment{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ReleaseName + "-webhook-server"}, deployment); err != nil {
		t.Fatal(err)
	}
	pod := deployment.Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.Volumes) != 1 || (pod.Volumes[0].Secret == nil) == (pod.Volumes[0].EmptyDir == nil) {
		t.Fatalf("the Deployment's pod: want one container and one Secret or emptyDir volume, got %d and %v", len(pod.Containers), pod.Volumes)
	}
	container := pod.Containers[0]

	certDir := t.TempDir()
	var env []string
	if pod.Volumes[0].Secret != nil {
		secret := &corev1.Secret{}
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pod.Volumes[0].Secret.SecretName}, secret); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"tls.crt", "tls.key"} {
			if err := os.WriteFile(filepath.Join(certDir, key), secret.Data[key], 0o600); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		// certificates.source=self: the webhook writes its certificate into
		// the emptyDir, and reaches the API server with the pod's token.
		if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
			t.Fatal("the Deployment's pod writes its certificate, and mounts no ServiceAccount token")
		}
		env = append(env, "KUBECONFIG="+c.serviceAccountKubeconfig(ctx, t, namespace, pod.ServiceAccountName))
	}

	// The container's env, as the kubelet resolves it: the ConfigMaps its
	// args name, read from the API server.
	live := &manifests.Manifests{}
	for _, env := range container.Env {
		if ref := env.ValueFrom; ref != nil && ref.ConfigMapKeyRef != nil {
			cm := &corev1.ConfigMap{}
			if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.ConfigMapKeyRef.Name}, cm); err != nil {
				t.Fatal(err)
			}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: obj}
			u.SetKind("ConfigMap")
			live.Objects = append(live.Objects, u)
		}
	}
	args, err := live.ExpandedArgs(container, namespace)
	if err != nil {
		t.Fatal(err)
	}
	args = slices.DeleteFunc(args, func(arg string) bool {
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		return slices.Contains([]string{"cert-dir", "port", "health-probe-bind-address", "metrics-bind-address"}, name)
	})
	memoryLimit := "MEMORY_LIMIT=" + strconv.FormatInt(container.Resources.Limits.Memory().Value(), 10)
	for attempt := 1; ; attempt++ {
		port, ran, stop, logs, err := startWebhook(ctx, t, binary, append(args, "--cert-dir="+certDir), append(env, memoryLimit)...)
		if err == nil {
			// The webhook serves the certificate the API server is to trust.
			conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true}) // only that TLS is served
			if err != nil {
				t.Fatalf("the webhook serves no TLS: %v\n%s", err, logs.String())
			}
			_ = conn.Close()
			c.proxy.route("127.0.0.1:" + strconv.Itoa(port))
			var unroute sync.Once
			stopRouted := func() {
				unroute.Do(func() { c.proxy.route("") })
				stop()
			}
			t.Cleanup(stopRouted)
			return stopRouted
		}
		stop()
		// freePort's port is free when it returns, but another socket (an
		// outgoing connection's, given an ephemeral port) may take it before
		// the webhook binds it: then the webhook gets other ports.
		if attempt < 3 && strings.Contains(logs.String(), "bind: address already in use") {
			t.Logf("attempt %d: a port was taken before the webhook listened on it; trying others", attempt)
			continue
		}
		t.Fatalf("the webhook, run as %v, never got ready: %v\n%s", ran, err, logs.String())
	}
}

// serviceAccountKubeconfig writes a kubeconfig for the API server with a
// token of the ServiceAccount, as the kubelet mounts into its pods, and
// returns its path: the webhook gets what RBAC grants the ServiceAccount.
func (c *cluster) serviceAccountKubeconfig(ctx context.Context, t *testing.T, namespace, name string) string {
	t.Helper()
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.client.SubResource("token").Create(ctx, sa, request); err != nil {
		t.Fatalf("a token of the ServiceAccount %s/%s: %v", namespace, name, err)
	}
	config, err := clientcmd.LoadFromFile(c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	current := config.Contexts[config.CurrentContext]
	config.AuthInfos = map[string]*clientcmdapi.AuthInfo{current.AuthInfo: {Token: request.Status.Token}}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startWebhook starts binary with args, a webhook port and a probe port of
// its own and env, and waits until it is ready. It returns the webhook
// port, the args it ran with, a stop that kills it (also run when t ends),
// its output, and why it did not get ready, if it did not.
func startWebhook(ctx context.Context, t *testing.T, binary string, args []string, env ...string) (int, []string, func(), *lockedBuffer, error) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	healthPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	args = append(slices.Clip(args), "--port="+strconv.Itoa(port), "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(healthPort),
		"--metrics-bind-address=0")

	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
	}
	t.Cleanup(stop)

	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errors.New("the webhook exited")
		default:
		}
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(healthPort) + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return port, args, stop, logs, err
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// lockedBuffer keeps a process's output, written and read from two goroutines.
type lockedBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	scanner := bufio.NewScanner(strings.NewReader(string(p)))
	for scanner.Scan() {
		b.lines = append(b.lines, scanner.Text())
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}
