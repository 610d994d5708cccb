package admission

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// servedGolden is every answer of TestServedAnswers, as the wire carries it.
var servedGolden = filepath.Join("testdata", "served.golden")

// servedRequest is a request of TestServedAnswers, as its bytes: head, then body.
type servedRequest struct {
	input string
	head  string
	body  []byte
}

// rawRequest is the request line and headers of a request of method with a
// body of contentLength bytes (none when negative), and headers of its own.
func rawRequest(method string, contentLength int, headers ...string) string {
	head := method + " " + Path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	for _, h := range headers {
		head += h + "\r\n"
	}
	if contentLength >= 0 {
		head += "Content-Length: " + strconv.Itoa(contentLength) + "\r\n"
	}
	return head + "\r\n"
}

// servedRequests are the requests of TestServedAnswers: every hostile input,
// every job Flyte's backend built and its dry run, and what the HTTP layer
// refuses or passes on: other methods, a chunked body, no body, a body at
// MaxBodyBytes and one byte over it.
func servedRequests(t testing.TB) []servedRequest {
	var requests []servedRequest
	for _, in := range append(hostileInputs(t), flyteBuiltInputs(t)...) {
		method, contentType := in.method, in.contentType
		if method == "" {
			method = http.MethodPost
		}
		if contentType == "" {
			contentType = "application/json"
		}
		requests = append(requests, servedRequest{in.input, rawRequest(method, len(in.body), "Content-Type: "+contentType), in.body})
	}
	valid := reviewOf(t, "v1", "CREATE", sampleJob(t, "v1", annotate(mutate.AnnotationTaskCustom, flytekitCustom)))
	capped := DefaultLimits().MaxBodyBytes
	padded := func(n int64) []byte { // the reference padded with blanks to n bytes
		return append(append([]byte{}, valid...), bytes.Repeat([]byte(" "), int(n)-len(valid))...)
	}
	chunked := fmt.Appendf(nil, "%x\r\n%s\r\n0\r\n\r\n", len(valid), valid)
	asJSON := "Content-Type: application/json"
	return append(requests,
		servedRequest{"GET", rawRequest(http.MethodGet, -1), nil},
		servedRequest{"PUT of the reference", rawRequest(http.MethodPut, len(valid), asJSON), valid},
		servedRequest{"the reference, chunked", rawRequest(http.MethodPost, -1, asJSON, "Transfer-Encoding: chunked"), chunked},
		servedRequest{"no body: neither Content-Length nor Transfer-Encoding", rawRequest(http.MethodPost, -1, asJSON), nil},
		servedRequest{"the reference padded to MaxBodyBytes", rawRequest(http.MethodPost, int(capped), asJSON), padded(capped)},
		servedRequest{"the reference padded to MaxBodyBytes + 1", rawRequest(http.MethodPost, int(capped)+1, asJSON), padded(capped + 1)},
	)
}

// TestServedAnswers sends every request of servedRequests, each on a
// connection of its own, to the webhook as cmd/webhook assembles it
// (server.New serving NewHandler) over TLS on loopback, and holds each
// answer, its status, headers but Date, and body, to testdata/served.golden:
// a change to any layer that changes an answer fails here. `make golden`
// (UPDATE_GOLDEN=1) rewrites the file.
func TestServedAnswers(t *testing.T) {
	certDir := t.TempDir()
	ca, err := fixtures.WriteServingCert(certDir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := l.Addr().String()
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir = "127.0.0.1", l.Addr().(*net.TCPAddr).Port, certDir
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress, cfg.ShutdownDrain = "0", "0", 0
	l.Close()
	mgr, err := server.New(cfg, server.DefaultLimits(), Path, NewHandler(mutate.DefaultOptions(), DefaultLimits(), nil))
	if err != nil {
		t.Fatal(err)
	}
	fixtures.Run(t, mgr)
	config := &tls.Config{RootCAs: ca.Pool()}
	fixtures.Poll(t, "the webhook serves TLS", func() bool {
		conn, err := tls.Dial("tcp", address, config)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})

	var got strings.Builder
	for i, req := range servedRequests(t) {
		fmt.Fprintf(&got, "### %d. %s\n%s\n", i+1, req.input, served(t, address, config, req))
	}

	if *updateGolden {
		if err := os.WriteFile(servedGolden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(servedGolden)
	if err != nil {
		t.Fatalf("%v (run `make golden` to write it)", err)
	}
	if diff := cmp.Diff(string(want), got.String()); diff != "" {
		t.Errorf("the webhook's answers differ from %s (-golden +served); if intended, run `make golden`:\n%s", servedGolden, diff)
	}
}

// served sends req on a new connection, and returns its answer: the status
// line, the headers but Date in order, a blank line and the body. The body's
// no-break spaces are written as spaces, and its Content-Length counts it
// so: protobuf-go words one error with either, chosen per binary.
func served(t *testing.T, address string, config *tls.Config, req servedRequest) string {
	t.Helper()
	conn, err := tls.Dial("tcp", address, config)
	if err != nil {
		t.Fatalf("%s: %v", req.input, err)
	}
	defer conn.Close()
	// Written beside the read: a body refused unread may never be read whole.
	go func() { _, _ = conn.Write(append([]byte(req.head), req.body...)) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s: %v", req.input, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer's body: %v", req.input, err)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != int64(len(body)) {
		t.Errorf("%s: Content-Length %d, a body of %d bytes", req.input, resp.ContentLength, len(body))
	}
	body = bytes.ReplaceAll(body, []byte("\u00a0"), []byte(" "))
	header := resp.Header.Clone()
	header.Del("Date")
	if resp.ContentLength >= 0 {
		header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	if resp.Close { // ReadResponse takes it out of the headers
		header.Set("Connection", "close")
	}
	for _, te := range resp.TransferEncoding {
		header.Add("Transfer-Encoding", te)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", resp.Proto, resp.Status)
	for _, key := range slices.Sorted(maps.Keys(header)) {
		for _, value := range header[key] {
			fmt.Fprintf(&b, "%s: %s\n", key, value)
		}
	}
	fmt.Fprintf(&b, "\n%s\n", body)
	return b.String()
}
