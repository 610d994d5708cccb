// Package admission serves the webhook's decision, mutate.Decide, as a
// Kubernetes mutating admission webhook. cmd/webhook makes the Handler
// (NewHandler, with its Limits) and gives it to internal/server
// (server.New), which serves it at Path behind its bounds on connections
// and requests; neither package imports the other.
//
// A review goes down one path, a file a step:
//
//  1. limits.go: the limiter reads the body whole, once, within Limits'
//     bounds on bodies (one cap, its bytes counted in one budget), then
//     takes a place among the reviews being decided (a fair.Gate), so that
//     no review waits for a client; it answers what it refuses;
//  2. read.go: readReview decodes the AdmissionReview and its MPIJob in one
//     pass (decodeReview); a body it cannot read, which no API server
//     sends, is read by the API machinery's codec instead, only so as to
//     answer it in the codec's words (decodeOther);
//  3. decide.go: handle gives the request to mutate.Decide (decide), counts
//     the decision, and recovers a panic;
//  4. answer.go: answer turns the decision into the response, a JSON patch
//     or a denial, and logs it;
//  5. write.go: writeReview writes the review's response.
//
// Past the limiter, every answer is byte for byte what controller-runtime's
// admission.Webhook answers around the same decision (TestAnswersAsWebhook
// holds them), and the one pass is the webhook's for its cost: the
// Webhook's codec reads a body four times and the object is then decoded
// again, which doubles the CPU of a review and halves the throughput over
// TLS (docs/PERFORMANCE.md).
package admission

import (
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// Path is where the webhook is served.
const Path = "/mutate-mpijob"

// Handler answers AdmissionReviews of MPIJobs: it is the webhook's
// http.Handler. NewHandler makes it.
type Handler struct {
	opts    mutate.Options
	jobs    *mutate.JobDecoder // of opts' FlyteTaskSelector
	observe func(mutate.Decision)
	log     logr.Logger
	limiter *limiter
}

// NewHandler returns the handler the server runs: it reads and decides
// each review within limits, decides with opts, counts each decision in
// flyte_mpi_webhook_decisions_total, and gives it to observe too, when
// observe is not nil.
func NewHandler(opts mutate.Options, limits Limits, observe func(mutate.Decision)) *Handler {
	return &Handler{opts: opts, jobs: mutate.NewJobDecoder(opts.FlyteTaskSelector), observe: observe,
		log: logf.Log.WithName("admission"), limiter: newLimiter(limits)}
}

// ServeHTTP answers an AdmissionReview: read, decode, decide, answer, write.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, done, ok := h.limiter.read(w, r)
	if !ok {
		return
	}
	// The answer is written holding the place: clients that never read
	// answers of up to 4 MiB delay no review (make soak's slow-reader).
	defer done()
	rv, refused := h.readReview(r, body)
	if refused != nil {
		h.log.Error(refused.err, refused.why)
		rv = &review{response: errored(refused.code, refused.err)} // written untyped: the body was no review
	} else {
		rv.response = h.handle(rv.request, rv.job, rv.jobErr)
	}
	writeReview(w, rv, h.log)
}

// HandleRequest answers req, an admission request already decoded, as
// ServeHTTP answers the review that carries it.
func (h *Handler) HandleRequest(req *admissionv1.AdmissionRequest) admissionv1.AdmissionResponse {
	job, err := decodeObject(req, h.jobs)
	return h.handle(req, job, err)
}
