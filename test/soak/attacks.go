package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// The attacks of docs/RELIABILITY.md, each an example of a class: its flags change its size.
var (
	helloConns  = flag.Int("hello-conns", 1000, "partial-hello: TLS connections")
	helloBytes  = flag.Int("hello-bytes", 64<<10, "partial-hello: the size the ClientHello declares; all but its last byte is sent")
	helloRenew  = flag.Duration("hello-renew", 5*time.Second, "partial-hello: each connection is closed and opened again after this")
	silentN     = flag.Int("silent-conns", 6000, "silent-conns: TCP connections that never send a byte (silent-half: half as many)")
	manyN       = flag.Int("many-containers", 80000, "many-containers: empty Worker containers in the review")
	manyClients = flag.Int("many-clients", 32, "many-containers: clients posting it back to back")
	hugeN       = flag.Int("huge-containers", 900000, "huge-containers: empty Worker containers in the review")
	hugeClients = flag.Int("huge-clients", 4, "huge-containers: clients posting it back to back")
	argsBytes   = flag.Int("args-bytes", 3<<20-4<<10, "escaped-args: size of the review whose Worker's one arg is all '<'")
	argsClients = flag.Int("args-clients", 4, "escaped-args: clients posting it back to back")
	headerConns = flag.Int("header-conns", 200, "header-flood: connections to each of the probe and metrics ports")
	headerBytes = flag.Int("header-bytes", 1<<20, "header-flood: bytes of one unterminated header line each connection sends")
	ctlBytes    = flag.Int("control-bytes", 64<<10, "control-bytes: size of the worker-spec-command annotation made of control bytes")
	ctlClients  = flag.Int("control-clients", 8, "control-bytes: clients posting it back to back")
	handshakers = flag.Int("handshakers", 1000, "handshake-flood: clients each doing full TLS handshakes and closing, back to back")
	idleN       = flag.Int("idle-conns", 1100, "fd-limit, idle-keepalive: TLS connections held idle, more than the webhook's -nofile leaves it")
	labelKeys   = flag.Int("label-keys", 30000, "many-labels: label keys in the review, beside the ones the selector reads")
	labelClient = flag.Int("label-clients", 32, "many-labels: clients posting it back to back")
	readerConns = flag.Int("reader-conns", 32, "slow-reader: TLS connections that post a review and never read its answer")
	readerBytes = flag.Int("reader-bytes", 3<<20-4<<10, "slow-reader: size of the review, whose Worker's one arg is all '<'")
	readerRenew = flag.Duration("reader-renew", 20*time.Second, "slow-reader: each connection is closed and opened again after this")
)

// attacker dials the attacks' connections: from attackerIP, another
// loopback address than the Flyte reviews' (127.0.0.1), or from the same.
var attacker = &net.Dialer{}

// attackFrom makes the attacks dial from ip; nil dials from the Flyte reviews' own address.
func attackFrom(ip net.IP) {
	attacker = &net.Dialer{}
	if ip != nil {
		attacker.LocalAddr = &net.TCPAddr{IP: ip}
	}
}

// attackTransport is an HTTP transport whose connections the attacker dials.
func attackTransport(w *webhook, keepAlive bool, idle int) *http.Transport {
	return &http.Transport{TLSClientConfig: w.attackTLS, DialContext: attacker.DialContext, DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: idle}
}

// idleConns holds -idle-conns TLS connections that complete a handshake
// and send nothing more, each opened again when closed: with the webhook's
// -nofile 1,024, more than its ports' bounds hold.
func idleConns(ctx context.Context, w *webhook) string {
	opened, failed := repeat(ctx, *idleN, func() error {
		return holdTLS(ctx, w, func(conn net.Conn) error {
			_, _ = io.Copy(io.Discard, conn)
			return nil
		})
	})
	return fmt.Sprintf("%d idle TLS connections: %d were closed by the webhook and opened again, %d failed", *idleN, opened, failed)
}

// idleKeepAlive holds -idle-conns TLS connections that each post one Flyte
// review, read its answer, and then stay idle, kept alive, as a client's
// connection pool parks them; each is opened again when closed.
func idleKeepAlive(ctx context.Context, w *webhook) string {
	var answered atomic.Int64
	review := flyteReview() // the Flyte reviews' own
	request := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		strings.TrimPrefix(w.url, "https://"+w.address), len(review), review)
	opened, failed := repeat(ctx, *idleN, func() error {
		return holdTLS(ctx, w, func(conn net.Conn) error {
			if _, err := conn.Write(request); err != nil {
				return err
			}
			reader := bufio.NewReader(conn)
			resp, err := http.ReadResponse(reader, nil)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answered.Add(1)
			_, _ = io.Copy(io.Discard, reader) // idle until the webhook closes it
			return nil
		})
	})
	return fmt.Sprintf("%d TLS connections, each one review answered then idle: %d reviews answered, %d connections closed by the webhook and opened again, %d failed",
		*idleN, answered.Load(), opened, failed)
}

// manyLabels posts a review whose labels hold -label-keys keys beside the
// selector's, which decoding must read past.
func manyLabels(ctx context.Context, w *webhook) string {
	return postBackToBack(ctx, w, *labelClient, manyLabelsReview(*labelKeys))
}

// manyLabelsReview returns the Flyte review with n more labels.
func manyLabelsReview(n int) []byte {
	job := must(fixtures.FlyteJob("v1", fixtures.HorovodWorkerCommand))
	labels := job.GetLabels()
	for i := range n {
		labels[fmt.Sprintf("soak-%d", i)] = "v"
	}
	job.SetLabels(labels)
	return reviewOf(job)
}

// partialHello opens -hello-conns connections that each send a ClientHello
// declaring -hello-bytes, but for its last byte, and wait.
func partialHello(ctx context.Context, w *webhook) string { return holdHellos(ctx, w, *helloBytes) }

// slowHello is partialHello with a ClientHello of half what the webhook
// reads (server.DefaultLimits().MaxClientHelloBytes): each connection takes a handshake
// place and holds it until the webhook closes it (server.Limits.SlowHandshake).
func slowHello(ctx context.Context, w *webhook) string {
	return holdHellos(ctx, w, server.DefaultLimits().MaxClientHelloBytes/2)
}

func holdHellos(ctx context.Context, w *webhook, size int) string {
	hello := partialClientHello(size)
	sent, failed := repeat(ctx, *helloConns, func() error { return hold(ctx, w.address, hello, *helloRenew) })
	return fmt.Sprintf("%d connections each sent a partial ClientHello of %d bytes: %d were closed or renewed and sent again, %d failed to connect",
		*helloConns, len(hello), sent, failed)
}

// partialClientHello returns a ClientHello handshake message that declares
// size bytes, all zero after its header, in TLS records of 16 KiB, without its last byte.
func partialClientHello(size int) []byte {
	body := size - 4
	msg := append([]byte{1, byte(body >> 16), byte(body >> 8), byte(body)}, make([]byte, body-1)...)
	var records []byte
	for chunk := range slices.Chunk(msg, 1<<14) {
		records = append(records, 22, 3, 1, byte(len(chunk)>>8), byte(len(chunk)))
		records = append(records, chunk...)
	}
	return records
}

// silentConns opens -silent-conns TCP connections to the webhook that never
// send a byte, each opened again when closed.
func silentConns(ctx context.Context, w *webhook) string { return silent(ctx, w, *silentN) }

// silentHalf is silentConns with half as many: a flood that fits the
// kernel's listen backlog.
func silentHalf(ctx context.Context, w *webhook) string { return silent(ctx, w, *silentN/2) }

func silent(ctx context.Context, w *webhook, n int) string {
	opened, failed := repeat(ctx, n, func() error { return hold(ctx, w.address, nil, 0) })
	return fmt.Sprintf("%d connections: %d were closed by the webhook and opened again, %d failed to connect", n, opened, failed)
}

// manyContainers posts a review with -many-containers empty Worker containers.
func manyContainers(ctx context.Context, w *webhook) string {
	return postBackToBack(ctx, w, *manyClients, emptyContainersReview(*manyN))
}

// hugeContainers posts a review with -huge-containers empty Worker containers.
func hugeContainers(ctx context.Context, w *webhook) string {
	return postBackToBack(ctx, w, *hugeClients, emptyContainersReview(*hugeN))
}

// emptyContainersReview returns the Flyte review with n empty containers
// after the Worker's own.
func emptyContainersReview(n int) []byte {
	const marker = `"soak-empty-containers"`
	review := workerReview(func(worker map[string]any) {
		worker["containers"] = append(worker["containers"].([]any), strings.Trim(marker, `"`))
	})
	return bytes.Replace(review, []byte(marker), []byte(strings.TrimSuffix(strings.Repeat("{},", n), ",")), 1)
}

// escapedArgs posts a review of -args-bytes whose Worker's one arg is all
// '<', which a JSON encoder that escapes HTML writes as six bytes.
func escapedArgs(ctx context.Context, w *webhook) string {
	return postBackToBack(ctx, w, *argsClients, escapedArgsReview(*argsBytes))
}

// escapedArgsReview returns the Flyte review, of size bytes, with one Worker arg of '<'.
func escapedArgsReview(size int) []byte {
	const marker = "soak-args"
	review := workerReview(func(worker map[string]any) {
		worker["containers"].([]any)[0].(map[string]any)["args"] = []any{marker}
	})
	return bytes.Replace(review, []byte(marker), bytes.Repeat([]byte("<"), size-len(review)+len(marker)), 1)
}

// slowReader posts escapedArgsReview(-reader-bytes), whose answer is a
// third larger, on -reader-conns TLS connections, and never reads the
// answer; each connection is closed and opened again after -reader-renew.
func slowReader(ctx context.Context, w *webhook) string {
	review := escapedArgsReview(*readerBytes)
	req := must(http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(review)))
	req.Header.Set("Content-Type", "application/json")
	var request bytes.Buffer
	must(0, req.Write(&request))
	sent, failed := repeat(ctx, *readerConns, func() error {
		return holdTLS(ctx, w, func(conn net.Conn) error {
			if _, err := conn.Write(request.Bytes()); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
			case <-time.After(*readerRenew):
			}
			return nil
		})
	})
	return fmt.Sprintf("%d connections each posted a review of %d bytes and read nothing: %d renewed, %d failed", *readerConns, len(review), sent, failed)
}

// holdTLS opens a TLS connection to the webhook from the attacker's
// address, does with it what with does, and closes it, at once when ctx ends.
func holdTLS(ctx context.Context, w *webhook, with func(net.Conn) error) error {
	conn, err := (&tls.Dialer{NetDialer: attacker, Config: w.attackTLS}).DialContext(ctx, "tcp", w.address)
	if err != nil {
		return err
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	return with(conn)
}

// controlBytes posts a review whose mpi.flyte.org/worker-spec-command is
// -control-bytes of control characters, which the webhook denies.
func controlBytes(ctx context.Context, w *webhook) string {
	return postBackToBack(ctx, w, *ctlClients, controlBytesReview(*ctlBytes))
}

// controlBytesReview returns the Flyte review with a worker-spec-command of
// size bytes, U+0001 to U+001F over and over.
func controlBytesReview(size int) []byte {
	line := make([]byte, size)
	for i := range line {
		line[i] = byte(1 + i%31)
	}
	job := must(fixtures.FlyteJob("v1", fixtures.HorovodWorkerCommand))
	job.SetAnnotations(map[string]string{"mpi.flyte.org/worker-spec-command": string(line)})
	return reviewOf(job)
}

// headerFlood opens -header-conns connections to each of the probe and
// metrics ports that each send one header line of -header-bytes and no end.
func headerFlood(ctx context.Context, w *webhook) string {
	header := append([]byte("GET /healthz HTTP/1.1\r\nHost: soak\r\nX-Soak: "), bytes.Repeat([]byte("a"), *headerBytes)...)
	var probeSent, probeFailed, metricsSent, metricsFailed int64
	var wg sync.WaitGroup
	wg.Go(func() {
		probeSent, probeFailed = repeat(ctx, *headerConns, func() error { return hold(ctx, w.probe, header, 0) })
	})
	wg.Go(func() {
		metricsSent, metricsFailed = repeat(ctx, *headerConns, func() error { return hold(ctx, w.metrics, header, 0) })
	})
	wg.Wait()
	return fmt.Sprintf("%d connections to each port, each sending a header of %d bytes: the probe port closed %d (%d failed to connect), the metrics port %d (%d)",
		*headerConns, len(header), probeSent, probeFailed, metricsSent, metricsFailed)
}

// handshakeFlood runs -handshakers clients that each complete a TLS
// handshake, close, and start again.
func handshakeFlood(ctx context.Context, w *webhook) string {
	dialer := &tls.Dialer{NetDialer: attacker, Config: w.attackTLS}
	done, failed := repeat(ctx, *handshakers, func() error {
		conn, err := dialer.DialContext(ctx, "tcp", w.address)
		if err != nil {
			return err
		}
		return conn.Close()
	})
	return fmt.Sprintf("%d clients completed %d handshakes, %d failed", *handshakers, done, failed)
}

// workerReview returns the Flyte review with its Worker's pod spec changed by edit.
func workerReview(edit func(worker map[string]any)) []byte {
	job := must(fixtures.FlyteJob("v1", fixtures.HorovodWorkerCommand))
	spec, _, err := unstructured.NestedMap(job.Object, "spec", "mpiReplicaSpecs", "Worker", "template", "spec")
	must(0, err)
	edit(spec)
	must(0, unstructured.SetNestedField(job.Object, spec, "spec", "mpiReplicaSpecs", "Worker", "template", "spec"))
	return reviewOf(job)
}

// reviewOf returns the review the API server sends for the creation of job, a v1 MPIJob.
func reviewOf(job *unstructured.Unstructured) []byte {
	return fixtures.Review(fixtures.MustJSON(job), fixtures.MPIJob("v1"), admissionv1.Create)
}

// repeat runs fn in n goroutines, each again as soon as it returns, until
// ctx ends, and returns how many runs succeeded and failed, those the end
// interrupted left out. After a failure it waits 100 ms: a webhook that refuses
// connections is not to be spun against.
func repeat(ctx context.Context, n int, fn func() error) (ok, failed int64) {
	var oks, fails atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := fn()
				switch {
				case ctx.Err() != nil:
				case err == nil:
					oks.Add(1)
				default:
					fails.Add(1)
					select {
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		})
	}
	wg.Wait()
	return oks.Load(), fails.Load()
}

// hold connects to address, writes data, and waits until the connection is
// closed, renew passes (if not 0) or ctx ends.
func hold(ctx context.Context, address string, data []byte, renew time.Duration) error {
	conn, err := attacker.DialContext(ctx, "tcp", address)
	if err != nil {
		return err
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	if renew > 0 {
		_ = conn.SetDeadline(time.Now().Add(renew))
	}
	if _, err := conn.Write(data); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, conn)
	return nil
}

// postBackToBack posts review from clients keep-alive clients, each as soon
// as its last was answered, until ctx ends, and says how they were answered.
func postBackToBack(ctx context.Context, w *webhook, clients int, review []byte) string {
	var mu sync.Mutex
	answers, largest := map[string]int{}, 0
	client := &http.Client{Transport: attackTransport(w, true, clients)}
	repeat(ctx, clients, func() error {
		answer, size, err := postCounting(ctx, client, w.url, review)
		if ctx.Err() != nil {
			return nil // interrupted by the scenario's end
		}
		mu.Lock()
		defer mu.Unlock()
		answers[answer]++
		largest = max(largest, size)
		return err
	})
	return fmt.Sprintf("%d clients posted a review of %d bytes: %v; largest response %d bytes", clients, len(review), answers, largest)
}

// postCounting posts review and returns how it was answered, and the
// response's size.
func postCounting(ctx context.Context, client *http.Client, url string, review []byte) (string, int, error) {
	req := must(http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(review)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "error", 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	var answer struct {
		Response *struct{ Allowed bool } `json:"response"`
	}
	switch {
	case err != nil:
		return "broken", len(body), err // the body's read failed
	case json.Unmarshal(body, &answer) != nil || answer.Response == nil:
		return fmt.Sprint(resp.StatusCode), len(body), nil
	case answer.Response.Allowed:
		return fmt.Sprint(resp.StatusCode, " allowed"), len(body), nil
	}
	return fmt.Sprint(resp.StatusCode, " denied"), len(body), nil
}
