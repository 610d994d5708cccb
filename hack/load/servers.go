//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// authority is the CA the load tool trusts, and issues serving
// certificates from: a rotation (installCertificate again, with a new
// certificate) then needs no change on the client's side.
type authority struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
	// Pool holds the CA, for the client.
	Pool *x509.CertPool
}

// certificate is a serving certificate and its key, PEM-encoded.
type certificate struct {
	CertPEM, KeyPEM []byte
}

// newAuthority makes a self-signed CA.
func newAuthority() (*authority, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "flyte-mpi-webhook load test CA"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	cert, err := sign(template, template, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &authority{cert: cert, key: key, Pool: pool}, nil
}

// issue makes a serving certificate for 127.0.0.1, as cert-manager's
// default does (RSA 2048), valid for validFor.
func (a *authority) issue(validFor time.Duration) (*certificate, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "flyte-mpi-webhook load test"},
		NotBefore:   time.Now().Add(-time.Minute),
		NotAfter:    time.Now().Add(validFor),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
	}
	cert, err := sign(template, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, err
	}
	return &certificate{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
	}, nil
}

func sign(template, parent *x509.Certificate, pub *rsa.PublicKey, signer *rsa.PrivateKey) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	template.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, template, parent, pub, signer)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// installCertificate writes c into dir as the kubelet writes a mounted
// Secret: the files in a new timestamped directory, the symlink ..data
// swapped to it in one rename, and tls.crt and tls.key linking through
// ..data. Called again on the same dir, it rotates the certificate the way
// cert-manager's renewal reaches a pod.
func installCertificate(dir string, c *certificate) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	previous, _ := os.Readlink(filepath.Join(dir, "..data"))
	version := "..." + time.Now().UTC().Format("2006_01_02_15_04_05.000000000")
	if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
		return err
	}
	for name, content := range map[string][]byte{"tls.crt": c.CertPEM, "tls.key": c.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, version, name), content, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(version, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				return err
			}
		}
	}
	if previous != "" && previous != version {
		return os.RemoveAll(filepath.Join(dir, previous))
	}
	return nil
}

// server is a webhook process the load tool started, or one it was given.
type server struct {
	// Name is what the report calls it: "webhook" or "no-op".
	Name string
	// URL is the webhook's HTTPS URL, path included.
	URL string
	// PID is the process whose memory is sampled; 0 when unknown.
	PID int
	// CertDir holds its certificate, as installCertificate wrote it, when the load tool started it.
	CertDir string
	// Log is the file its standard output and error go to, when the load tool started it.
	Log string

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited
}

// startServer starts binary with the flags cmd/webhook and hack/noop-webhook
// share, serving on free ports of 127.0.0.1 with the certificate in certDir,
// and returns once it is ready (/readyz, which waits for TLS).
func startServer(ctx context.Context, name, binary, certDir, logPath string, extraArgs ...string) (*server, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	health := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2]))
	args := append([]string{
		"--port", strconv.Itoa(ports[0]),
		"--cert-dir", certDir,
		"--metrics-bind-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		"--health-probe-bind-address", health,
	}, extraArgs...)
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // never outlive the load tool
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	s := &server{
		Name: name, URL: fmt.Sprintf("https://127.0.0.1:%d/mutate-mpijob", ports[0]),
		PID: cmd.Process.Pid, CertDir: certDir, Log: logPath, cmd: cmd, exited: make(chan struct{}),
	}
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(s.exited) }()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		resp, err := http.Get("http://" + health + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("%s exited before it was ready (%v); its log: %s", binary, waitErr, logPath)
		case <-ctx.Done():
			s.Stop()
			return nil, fmt.Errorf("%s was not ready in time; its log: %s", binary, logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops a server the load tool started, and waits a little for it to exit.
func (s *server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// clientTLS is the load tool's TLS configuration: it verifies the servers
// against pool, or does not verify them at all when insecure.
func clientTLS(pool *x509.CertPool, insecure bool) *tls.Config {
	return &tls.Config{RootCAs: pool, InsecureSkipVerify: insecure, MinVersion: tls.VersionTLS12} //nolint:gosec // -insecure is the user's choice
}
