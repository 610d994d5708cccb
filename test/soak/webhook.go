package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// schedstat returns how long the threads of process pid have run on a core
// and waited, runnable, for one (/proc/PID/task/*/schedstat), summed; 0 once
// it has exited.
func schedstat(pid int) (ran, waited time.Duration) {
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, path := range paths {
		var r, w int64
		if b, err := os.ReadFile(path); err == nil {
			_, _ = fmt.Sscan(string(b), &r, &w)
		}
		ran, waited = ran+time.Duration(r), waited+time.Duration(w)
	}
	return ran, waited
}

// webhook is a running bin/webhook, confined as its Deployment confines it.
type webhook struct {
	cmd                   *exec.Cmd
	ca                    *fixtures.Authority
	certDir, address, url string
	probe, metrics        string
	// tls is the Flyte reviews' client configuration, with the API
	// server's client certificate under -client-auth, and attackTLS the
	// attacks', which never has one.
	tls, attackTLS *tls.Config
	logs           *logCounter
	hwmKiB         atomic.Int64
	oomKilled      atomic.Bool
	exited         chan struct{}
	exitErr        error
	memoryLimit    string
	// missed holds the targets of the attack itself that it missed, such as a rotation not served.
	missed []string
}

// startWebhook starts bin/webhook on loopback ports with a certificate
// mounted as the kubelet mounts a Secret, pinned to core -cpu, with the
// Deployment's MEMORY_LIMIT and RLIMIT_NOFILE -nofile, and waits until it is
// ready. Under -client-auth it runs with --client-ca-name, the CA's bundle
// beside the certificate, as the chart's clientAuth puts it.
func startWebhook(name string) *webhook {
	dir := must(os.MkdirTemp("", "soak-"+name))
	w := &webhook{ca: must(fixtures.NewAuthority()), certDir: filepath.Join(dir, "certs"), logs: &logCounter{}, exited: make(chan struct{})}
	must(0, fixtures.Mount(w.certDir, w.issue()))
	w.address, w.probe, w.metrics = freeAddress(), freeAddress(), freeAddress()
	w.url, w.tls = "https://"+w.address+"/mutate-mpijob", &tls.Config{RootCAs: w.ca.Pool()}
	w.attackTLS = w.tls
	_, port, _ := net.SplitHostPort(w.address)
	w.memoryLimit = deploymentMemoryLimit()
	limit := resource.MustParse(w.memoryLimit)
	args := []string{"--cert-dir", w.certDir, "--port", port,
		"--metrics-bind-address", w.metrics, "--health-probe-bind-address", w.probe, "--shutdown-drain", drainFor.String()}
	if *clientAuth {
		clientCA := must(fixtures.NewAuthority())
		must(0, os.WriteFile(filepath.Join(w.certDir, "client-ca.crt"), clientCA.CertPEM, 0o600))
		apiServer := must(must(clientCA.IssueClient("kube-apiserver")).TLS())
		w.tls = &tls.Config{RootCAs: w.ca.Pool(), Certificates: []tls.Certificate{apiServer}}
		args = append(args, "--client-ca-name=client-ca.crt")
	}
	w.cmd = exec.Command("taskset", append([]string{"--cpu-list", strconv.Itoa(*cpu), *binary}, args...)...)
	// In bytes, as the downward API writes limits.memory with divisor 1.
	w.cmd.Env = append(os.Environ(), "MEMORY_LIMIT="+strconv.FormatInt(limit.Value(), 10))
	if *gomaxprocs > 0 {
		w.cmd.Env = append(w.cmd.Env, "GOMAXPROCS="+strconv.Itoa(*gomaxprocs))
	}
	if *logDir != "" {
		w.logs.file = must(os.Create(filepath.Join(*logDir, name+".log")))
	}
	w.cmd.Stdout, w.cmd.Stderr = w.logs, w.logs
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the soak, however it ends
	must(0, w.cmd.Start())
	must(0, unix.Prlimit(w.cmd.Process.Pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: *nofile, Max: *nofile}, nil))
	go func() {
		w.exitErr = w.cmd.Wait()
		os.RemoveAll(dir)
		if w.logs.file != nil {
			w.logs.file.Close()
		}
		close(w.exited)
	}()
	go w.watchMemory(limit.Value())
	for start := time.Now(); !w.ready(); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			must(0, fmt.Errorf("the webhook was not ready within 30 s: %s", w.death()))
		}
	}
	return w
}

// issue makes a serving certificate with a -serving-key key.
func (w *webhook) issue() *fixtures.ServingCert {
	if *servingKey == "rsa" {
		return must(w.ca.Issue(time.Hour))
	}
	return must(w.ca.IssueECDSA(time.Hour))
}

// client returns a keep-alive client that keeps up to 25 idle connections,
// as client-go's transports (the API server's) do.
func (w *webhook) client() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: w.tls, MaxIdleConnsPerHost: 25}}
}

func (w *webhook) ready() bool {
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + w.probe + "/readyz")
	return err == nil && resp.Body.Close() == nil && resp.StatusCode == http.StatusOK
}

// watchMemory records the peak resident memory (VmHWM) until the webhook
// exits, and kills it as the kernel's OOM killer would once its resident
// memory passes the container's limit: without a cgroup, RSS is the nearest
// measure of what the cgroup would charge (it leaves out socket buffers).
func (w *webhook) watchMemory(limit int64) {
	for tick := time.Tick(10 * time.Millisecond); ; <-tick {
		select {
		case <-w.exited:
			return
		default:
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.cmd.Process.Pid))
		if err != nil {
			return
		}
		w.hwmKiB.Store(statusKiB(status, "VmHWM:"))
		if *oomKill && statusKiB(status, "VmRSS:")<<10 > limit {
			w.oomKilled.Store(true)
			_ = w.cmd.Process.Kill()
			return
		}
	}
}

// statusKiB returns the value of field in /proc/PID/status, in KiB.
func statusKiB(status []byte, field string) (kib int64) {
	_, value, _ := strings.Cut(string(status), field)
	_, _ = fmt.Sscanf(value, "%d", &kib)
	return kib
}

// death says why the webhook exited.
func (w *webhook) death() string {
	select {
	case <-w.exited:
	default:
		return "still running"
	}
	if w.oomKilled.Load() {
		return "OOM-killed: resident memory above the limit " + w.memoryLimit
	}
	return fmt.Sprint(w.exitErr)
}

func (w *webhook) kill() {
	_ = w.cmd.Process.Kill()
	<-w.exited
}

// logCounter counts the bytes and lines the webhook logs, and keeps them in file if set.
type logCounter struct {
	bytes, lines atomic.Int64
	file         *os.File
}

func (c *logCounter) Write(p []byte) (int, error) {
	c.bytes.Add(int64(len(p)))
	c.lines.Add(int64(bytes.Count(p, []byte("\n"))))
	if c.file != nil {
		return c.file.Write(p)
	}
	return len(p), nil
}

// deploymentMemoryLimit returns the limits.memory of config/manager/manager.yaml, its one container's.
func deploymentMemoryLimit() string {
	b := must(os.ReadFile(must(fixtures.Path("config", "manager", "manager.yaml"))))
	_, limits, _ := strings.Cut(string(b), "limits:")
	_, memory, _ := strings.Cut(limits, "memory:")
	return strings.Fields(memory)[0]
}

// freeAddress returns a loopback address whose port is free, for one of the webhook's listeners.
func freeAddress() string {
	// On every address, as the webhook listens: after a flood, a port free on
	// 127.0.0.1 may still be held on 127.0.0.2 by one of the attacker's sockets.
	l := must(net.Listen("tcp", ":0"))
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
}
