// Package flyte_test runs Flyte's own backend, flytepropeller v1.16.8's k8s
// PluginManager with flyteplugins' mpi plugin (test/flyte's flyte-backend
// launch), with a real client to an API server that calls the webhook,
// and checks what Flyte reports for each answer and what the API server
// stored.
package flyte_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/e2e/operator"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

func TestFlyte(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "e2e Flyte's backend (flytepropeller v1.16.8) kubeflow.org/v1")
}

// launchTimeout bounds one run of Flyte's backend on one task.
const launchTimeout = time.Minute

// policyTimeout bounds the wait for the API server to pick up a changed
// webhook configuration.
const policyTimeout = 30 * time.Second

var (
	cluster    = &operator.Cluster{}
	backend    string // test/flyte's binary, flyte-backend
	kubeconfig string
)

var _ = BeforeSuite(func(ctx SpecContext) {
	var err error
	backend, err = operator.Binary("FLYTE_BACKEND_BIN")
	Expect(err).NotTo(HaveOccurred())
	cluster.Env, err = framework.Start(ctx, "v1")
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err = cluster.Env.WriteKubeConfig(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(framework.StartTimeout))

var _ = AfterSuite(cluster.Stop)

// launchResult is what flyte-backend launch prints: what Flyte
// reports for the task's first attempt.
type launchResult struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
	Error  *struct {
		Code, Kind, Message string
	} `json:"error"`
	HandleError *struct {
		Code, Message string
	} `json:"handleError"`
}

// launch runs Flyte's backend on the task of testdata/flyte's case name in
// namespace, with extra flags of the launch subcommand, and returns what
// Flyte reports.
func launch(ctx context.Context, namespace, name string, extra ...string) launchResult {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(ctx, launchTimeout)
	defer cancel()
	args := append([]string{"launch", "-kubeconfig", kubeconfig, "-namespace", namespace, "-case", name}, extra...)
	cmd := exec.CommandContext(ctx, backend, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	Expect(cmd.Run()).To(Succeed(), "%s %v:\n%s", filepath.Base(backend), args, &stderr)
	var result launchResult
	Expect(json.Unmarshal(stdout.Bytes(), &result)).To(Succeed(), "%s", &stdout)
	fmt.Fprintf(GinkgoWriter, "Flyte reports for %s: %s", name, &stdout)
	return result
}

// storedJobs returns the MPIJobs stored in namespace.
func storedJobs(ctx context.Context, namespace string) []unstructured.Unstructured {
	GinkgoHelper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(fixtures.MPIJob("v1"))
	Expect(cluster.Env.Client.List(ctx, list, client.InNamespace(namespace))).To(Succeed())
	return list.Items
}

// expectedJob is testdata/flyte/v1's job name, which Flyte's backend builds
// on a fake client, in namespace, as the webhook with opts would store it:
// what the API server must hold after Flyte's backend created the job.
func expectedJob(name, namespace string, opts mutate.Options) *unstructured.Unstructured {
	GinkgoHelper()
	job, err := fixtures.FlyteJob("v1", name)
	Expect(err).NotTo(HaveOccurred())
	job.SetNamespace(namespace)
	object := fixtures.MustJSON(job)
	var review admissionv1.AdmissionReview
	Expect(json.Unmarshal(fixtures.Review(object, fixtures.MPIJob("v1"), admissionv1.Create), &review)).To(Succeed())
	resp := admission.NewHandler(opts, admission.DefaultLimits(), nil).HandleRequest(review.Request)
	Expect(resp.Allowed).To(BeTrue(), "the webhook denies testdata's %s: %v", name, resp.Result)
	if len(resp.Patch) > 0 {
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		Expect(err).NotTo(HaveOccurred())
		object, err = patch.Apply(object)
		Expect(err).NotTo(HaveOccurred())
	}
	want := &unstructured.Unstructured{}
	Expect(want.UnmarshalJSON(object)).To(Succeed())
	// The API server's own doing: the CRD's schema defaults runPolicy.suspend.
	Expect(unstructured.SetNestedField(want.Object, false, "spec", "runPolicy", "suspend")).To(Succeed())
	return want
}

// expectStored checks that namespace holds one MPIJob, want as Flyte sent
// it: its name, labels, annotations, owner and spec.
func expectStored(ctx context.Context, namespace string, want *unstructured.Unstructured) {
	GinkgoHelper()
	jobs := storedJobs(ctx, namespace)
	Expect(jobs).To(HaveLen(1))
	got := &jobs[0]
	Expect(got.GetName()).To(Equal(want.GetName()))
	Expect(cmp.Diff(want.GetLabels(), got.GetLabels())).To(BeEmpty(), "labels (-want +got)")
	Expect(cmp.Diff(want.GetAnnotations(), got.GetAnnotations())).To(BeEmpty(), "annotations (-want +got)")
	Expect(cmp.Diff(want.GetOwnerReferences(), got.GetOwnerReferences())).To(BeEmpty(), "owner references (-want +got)")
	Expect(cmp.Diff(want.Object["spec"], got.Object["spec"])).To(BeEmpty(), "spec (-want +got)")
}

// webhookName is the name of the webhook of config/default, as the API server quotes it.
func webhookName() string { return cluster.Env.Webhook.Webhooks[0].Name }

// awaitPolicy waits until a dry-run create of a Flyte job labelled label
// meets check: the API server picks up a changed webhook configuration a
// little after storing it.
func awaitPolicy(ctx context.Context, namespace, label string, check func(g Gomega, err error)) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		job := cluster.Env.Job(namespace, fixtures.HorovodNoWorkerCommand).Label(label, "true").Obj()
		check(g, cluster.Env.Client.Create(ctx, job, client.DryRunAll))
	}).WithTimeout(policyTimeout).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// downLabelled routes the Flyte jobs labelled label to a webhook server of
// their own, and stops it: its configuration stays, as a cluster's does
// while the webhook is down. It returns that configuration's name.
func downLabelled(ctx context.Context, label string) string {
	GinkgoHelper()
	Expect(cluster.Env.ServeLabelled(ctx, label, mutate.DefaultOptions())).To(Succeed())
	Expect(cluster.Env.StopLabelled(label)).To(Succeed())
	return cluster.Env.LabelledConfiguration(label)
}

// updateWebhooks applies change to every webhook of the configuration name.
func updateWebhooks(ctx context.Context, name string, change func(*admissionregistrationv1.MutatingWebhook)) {
	GinkgoHelper()
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
	Expect(cluster.Env.Client.Get(ctx, client.ObjectKey{Name: name}, hook)).To(Succeed())
	for i := range hook.Webhooks {
		change(&hook.Webhooks[i])
	}
	Expect(cluster.Env.Client.Update(ctx, hook)).To(Succeed())
}

// denier is a control webhook that denies every review with one HTTP code
// and reason, to measure what Flyte makes of each.
func denier(code int32, reason metav1.StatusReason) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Result: &metav1.Status{
			Status: metav1.StatusFailure, Code: code, Reason: reason, Message: "the control webhook denies every job",
		}}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}
}

var _ = Describe("Flyte's backend, through the API server and the webhook", func() {
	var namespace string

	BeforeEach(func(ctx SpecContext) {
		namespace = cluster.Namespace(ctx)
	})

	names, err := fixtures.FlyteJobNames("v1")
	if err != nil {
		panic(err)
	}
	for _, name := range names {
		It("queues the task of "+name+", and the API server stores its job as the webhook decides", func(ctx SpecContext) {
			got := launch(ctx, namespace, name)
			Expect(got).To(Equal(launchResult{Phase: "PhaseQueued", Reason: "task submitted to K8s"}))
			expectStored(ctx, namespace, expectedJob(name, namespace, mutate.DefaultOptions()))
		})
	}

	It("fails a task with an invalid annotation at once: PhasePermanentFailure, BadTaskFormat, the annotation named; nothing stored", func(ctx SpecContext) {
		got := launch(ctx, namespace, fixtures.HorovodNoWorkerCommand,
			"-task-annotation", mutate.AnnotationTaskCustom+"=not JSON")
		Expect(got.HandleError).To(BeNil())
		Expect(got.Phase).To(Equal("PhasePermanentFailure"))
		Expect(got.Error).NotTo(BeNil())
		Expect(got.Error.Code).To(Equal("BadTaskFormat"))
		Expect(got.Error.Kind).To(Equal("USER"))
		Expect(got.Error.Message).To(Equal(`admission webhook "` + webhookName() + `" denied the request: ` +
			`mpi.flyte.org/task-custom: is neither a JSON object nor standard base64: illegal base64 data at input byte 3`))
		Expect(storedJobs(ctx, namespace)).To(BeEmpty())
	})

	It("with --on-invalid=warn, queues a task with an invalid annotation and stores its job unchanged", func(ctx SpecContext) {
		got := launch(ctx, namespace, fixtures.HorovodNoWorkerCommand,
			"-task-annotation", mutate.AnnotationTaskCustom+"=not JSON",
			"-execution-label", framework.OnInvalidWarnLabel+"=true")
		Expect(got).To(Equal(launchResult{Phase: "PhaseQueued", Reason: "task submitted to K8s"}))
		jobs := storedJobs(ctx, namespace)
		Expect(jobs).To(HaveLen(1))
		Expect(jobs[0].GetAnnotations()).To(And(
			HaveKeyWithValue(mutate.AnnotationTaskCustom, "not JSON"), Not(HaveKey(mutate.AnnotationWorkerCommandSource))))
	})

	It("with the webhook down and failurePolicy Fail, returns a system error and stores nothing; with Ignore, stores the job unchanged", func(ctx SpecContext) {
		const label = "test.mpi.flyte.org/flyte-webhook-down"
		configuration := downLabelled(ctx, label)
		// The task of a declared worker command, whose job the webhook would change.
		name := fixtures.HorovodWorkerCommand

		// failurePolicy: Fail, as config/default installs it.
		Expect(cluster.Env.Webhook.Webhooks[0].FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)))
		got := launch(ctx, namespace, name, "-execution-label", label+"=true")
		Expect(got.Phase).To(BeEmpty())
		Expect(got.HandleError).NotTo(BeNil())
		// flytepropeller's launchResource: the API status's reason as the error code.
		Expect(got.HandleError.Code).To(Equal(string(metav1.StatusReasonInternalError)))
		Expect(got.HandleError.Message).To(And(ContainSubstring("failed to create resource"),
			ContainSubstring(`failed calling webhook "`+label[len("test.mpi.flyte.org/"):]+"."+webhookName()+`"`)))
		Expect(storedJobs(ctx, namespace)).To(BeEmpty())

		// failurePolicy: Ignore, as config/failure-policy-ignore installs it.
		updateWebhooks(ctx, configuration, func(w *admissionregistrationv1.MutatingWebhook) {
			w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		})
		awaitPolicy(ctx, namespace, label, func(g Gomega, err error) { g.Expect(err).NotTo(HaveOccurred()) })
		got = launch(ctx, namespace, name, "-execution-label", label+"=true")
		Expect(got).To(Equal(launchResult{Phase: "PhaseQueued", Reason: "task submitted to K8s"}))
		sent, err := fixtures.FlyteJob("v1", name)
		Expect(err).NotTo(HaveOccurred())
		jobs := storedJobs(ctx, namespace)
		Expect(jobs).To(HaveLen(1))
		Expect(framework.WorkerContainers(&jobs[0])).To(Equal(framework.WorkerContainers(sent)))
		Expect(jobs[0].GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource))
	})

	// A control webhook on the same chain: what Flyte makes of a denial
	// with each code, the webhook's own 422 Invalid beside the alternatives.
	DescribeTable("a denial by a control webhook",
		func(ctx SpecContext, code int32, reason metav1.StatusReason, phase, errorCode string) {
			label := "test.mpi.flyte.org/flyte-deny-" + strings.ToLower(string(reason))
			configuration := downLabelled(ctx, label)
			server := httptest.NewUnstartedServer(denier(code, reason))
			cert, err := tls.LoadX509KeyPair(filepath.Join(cluster.Env.ServingCertDir(), "tls.crt"),
				filepath.Join(cluster.Env.ServingCertDir(), "tls.key"))
			Expect(err).NotTo(HaveOccurred())
			server.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
			server.StartTLS()
			DeferCleanup(server.Close)
			updateWebhooks(ctx, configuration, func(w *admissionregistrationv1.MutatingWebhook) {
				w.ClientConfig.URL = ptr.To(server.URL + admission.Path)
			})
			awaitPolicy(ctx, namespace, label, func(g Gomega, err error) {
				g.Expect(apierrors.ReasonForError(err)).To(Equal(reason))
			})

			got := launch(ctx, namespace, fixtures.HorovodNoWorkerCommand, "-execution-label", label+"=true")
			Expect(got.HandleError).To(BeNil())
			Expect(got.Phase).To(Equal(phase))
			Expect(got.Error).NotTo(BeNil())
			Expect(got.Error.Code).To(Equal(errorCode))
			Expect(got.Error.Kind).To(Equal("USER"))
			Expect(got.Error.Message).To(ContainSubstring("denied the request: the control webhook denies every job"))
			Expect(storedJobs(ctx, namespace)).To(BeEmpty())
		},
		Entry("422 Invalid, as the webhook denies: a permanent failure", int32(http.StatusUnprocessableEntity),
			metav1.StatusReasonInvalid, "PhasePermanentFailure", "BadTaskFormat"),
		Entry("400 BadRequest: a permanent failure", int32(http.StatusBadRequest),
			metav1.StatusReasonBadRequest, "PhasePermanentFailure", "BadTaskFormat"),
		Entry("403 Forbidden, as controller-runtime's admission.Denied: a retryable failure, denied again on every retry",
			int32(http.StatusForbidden), metav1.StatusReasonForbidden, "PhaseRetryableFailure", "RuntimeFailure"),
	)
})
