//go:build unix

package admission

// BenchmarkAdmit, the in-process benchmark of docs/PERFORMANCE.md, serves
// an AdmissionReview with the webhook's http.Handler and with the floor's,
// refhook's no-op, which decodes the review and allows it. `make bench`
// compares them with benchstat:
//
//	go test -run '^$' -bench '^BenchmarkAdmit$' -benchmem -count 6 ./internal/admission > admit.txt
//	benchstat -row /case -col /path admit.txt

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/bench/refhook"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// benchCase is an AdmissionReview of refhook.Job of version, and whether it is a Flyte job, which the webhook mutates.
type benchCase struct {
	name, version string
	flyte         bool
	body          []byte
}

// benchCases are Flyte's Horovod MPIJob, v1 and v2beta1, and one that is not Flyte's, which the webhook leaves alone.
func benchCases(t testing.TB) []benchCase {
	cases := []benchCase{{"v1", "v1", true, nil}, {"v2beta1", "v2beta1", true, nil}, {"not-flyte", "v1", false, nil}}
	for i, c := range cases {
		job, err := refhook.Job(c.version)
		if err != nil {
			t.Fatal(err)
		}
		if !c.flyte {
			job.SetLabels(nil)
		}
		cases[i].body = fixtures.Review(fixtures.MustJSON(job), fixtures.MPIJob(c.version), admissionv1.Create)
	}
	return cases
}

// benchPaths are the handlers compared: ours and the floor.
func benchPaths() map[string]http.Handler {
	return map[string]http.Handler{"webhook": newHandler(), "floor": refhook.Handler(nil)}
}

// benchLog is the logger cmd/webhook runs with (zap, JSON, info), writing nowhere.
var benchLog = zap.New(zap.WriteTo(io.Discard))

// serve answers body with h, as the webhook server calls it.
func serve(h http.Handler, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req.WithContext(logf.IntoContext(req.Context(), benchLog)))
	return rec
}

func BenchmarkAdmit(b *testing.B) {
	// The global logger too, as cmd/webhook sets it: left unset, controller-runtime
	// writes a warning into the benchmark's output after 30 s, in a result line.
	logf.SetLogger(benchLog)
	for _, c := range benchCases(b) {
		for name, h := range benchPaths() {
			b.Run("case="+c.name+"/path="+name, func(b *testing.B) {
				checkAnswer(b, c, name, h)
				b.SetBytes(int64(len(c.body)))
				b.ReportAllocs()
				cpu := processCPUTime(b)
				for b.Loop() {
					serve(h, c.body)
				}
				b.ReportMetric(float64(processCPUTime(b)-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPUTime is the CPU time the process has used, garbage collection
// included: on a shared machine it varies less than ns/op, which is wall time.
func processCPUTime(t testing.TB) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		t.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// TestBenchmarkPaths checks that every path answers every case correctly,
// so that no figure is of a path that does less than it should.
func TestBenchmarkPaths(t *testing.T) {
	for _, c := range benchCases(t) {
		for name, h := range benchPaths() {
			t.Run(c.name+"/"+name, func(t *testing.T) { checkAnswer(t, c, name, h) })
		}
	}
}

// checkAnswer checks that h allows c with its uid and, when it is the
// webhook and c is a Flyte job, with a patch that makes the worker run sshd.
func checkAnswer(t testing.TB, c benchCase, path string, h http.Handler) {
	t.Helper()
	rec := serve(h, c.body)
	var in, out admissionv1.AdmissionReview
	if err := errors.Join(json.Unmarshal(c.body, &in), json.Unmarshal(rec.Body.Bytes(), &out)); err != nil || out.Response == nil ||
		rec.Code != http.StatusOK || out.Response.UID != in.Request.UID || !out.Response.Allowed {
		t.Fatalf("%s: not an allowed AdmissionReview response with the uid: %v: %d %s", path, err, rec.Code, rec.Body)
	}
	var job mutate.Job // as the API server stores it, patched or not
	if err := json.Unmarshal(applyPatch(t, in.Request.Object.Raw, out.Response), &job); err != nil {
		t.Fatal(err)
	}
	command := job.Spec.MPIReplicaSpecs.Worker.Template.Spec.Containers[0].Command
	if runsSSHD := command != nil && slices.Equal(*command, fixtures.SSHD); runsSSHD != (path == "webhook" && c.flyte) {
		t.Fatalf("%s: the worker runs command %v; want sshd: %t", path, command, !runsSSHD)
	}
}
