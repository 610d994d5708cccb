package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// TestShutdownDrains stops the server under a steady stream of requests on
// new connections, as the API server sends them to a pod that terminates,
// and checks: /readyz fails from the stop on; every request is answered,
// and told to close its connection, until the drain ends; then new
// connections are refused, and a request in flight still gets its answer.
func TestShutdownDrains(t *testing.T) {
	certDir := t.TempDir()
	ca, err := fixtures.WriteServingCert(certDir)
	if err != nil {
		t.Fatal(err)
	}
	port, probe := freePort(t), freePort(t)
	cfg := DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir = "127.0.0.1", port, certDir
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "127.0.0.1:"+strconv.Itoa(probe)

	// The handler answers at once, or, for a request to /slow, once released.
	slowEntered, releaseSlow := make(chan struct{}), make(chan struct{})
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/slow" {
			close(slowEntered)
			<-releaseSlow
		}
		_, _ = io.WriteString(w, "answered")
	})
	mgr, err := New(cfg, DefaultLimits(), "/fast", hook)
	if err != nil {
		t.Fatal(err)
	}
	mgr.GetWebhookServer().Register("/slow", hook)
	drainOver := make(chan time.Time)
	mgr.GetWebhookServer().(*webhookServer).drainDone = func(time.Duration) <-chan time.Time { return drainOver }
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()

	ready := func() bool {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(probe) + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	fixtures.Poll(t, "the webhook is ready", ready)

	address := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, DisableKeepAlives: true}}
	post := func(path string) (*http.Response, error) {
		resp, err := client.Post("https://"+address+path, "application/json", nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	// A steady stream of requests, from before the stop to the drain's end.
	var mu sync.Mutex
	var answered, failed int
	var failures []error
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var load sync.WaitGroup
	load.Go(func() {
		for loadCtx.Err() == nil {
			resp, err := post("/fast")
			mu.Lock()
			if err != nil || resp.StatusCode != http.StatusOK {
				failed++
				failures = append(failures, err)
			} else {
				answered++
			}
			mu.Unlock()
		}
	})
	slowAnswer := make(chan error, 1)
	go func() {
		resp, err := post("/slow")
		if err == nil && resp.StatusCode != http.StatusOK {
			err = errors.New(resp.Status)
		}
		slowAnswer <- err
	}()
	<-slowEntered
	answeredBefore := func() int { mu.Lock(); defer mu.Unlock(); return answered }()

	stop()
	fixtures.Poll(t, "/readyz fails", func() bool { return !ready() })
	if ready() {
		t.Error("/readyz passed again during the drain")
	}
	// Requests during the drain are answered, and told to close their connection.
	resp, err := post("/fast")
	if err != nil || resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("a request during the drain: %v %v, want 200 and Connection: close", resp, err)
	}
	fixtures.Poll(t, "the stream gets answers during the drain", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return answered > answeredBefore+10
	})
	stopLoad()
	load.Wait()
	if failed > 0 {
		t.Errorf("%d of %d requests failed before the drain ended: %v", failed, failed+answered, failures)
	}

	close(drainOver)
	fixtures.Poll(t, "new connections are refused", func() bool {
		conn, err := net.Dial("tcp", address)
		if err == nil {
			conn.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	close(releaseSlow)
	if err := <-slowAnswer; err != nil {
		t.Errorf("the request in flight when the drain ended: %v, want an answer", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("the manager: %v", err)
	}
}

// poll waits until cond holds.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
