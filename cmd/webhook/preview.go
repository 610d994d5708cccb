package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// errDenied is a preview whose MPIJob the server would reject; the reason is already printed.
var errDenied = errors.New("denied")

// runPreview prints an MPIJob as the webhook would store it. It sends the job
// through the server's own handler, so the preview cannot drift from it.
func runPreview(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := subcommandFlags("preview", "usage: webhook preview -f FILE [decision flags]\n\n"+
		"Prints the MPIJob in FILE (YAML or JSON, kubeflow.org/v1 or v2beta1; - reads standard input)\n"+
		"as the webhook would store it, and the decision on standard error.", stderr)
	file := fs.String("f", "", "the MPIJob to preview; - reads standard input")
	opts := mutate.DefaultOptions()
	bindDecisionFlags(fs, &opts)
	if err := fs.Parse(args); err != nil {
		return err
	}
	data, err := readInput(*file, stdin)
	if err != nil {
		return err
	}
	object, gvk, err := readMPIJob(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}

	var decision mutate.Decision
	handler := admission.NewHandler(opts, defaultLimits().review, func(d mutate.Decision) { decision = d })
	resp := previewCreate(handler, object, gvk)
	printDecision(stderr, decision, resp.Warnings)
	if !resp.Allowed {
		// As the API server answers the create: code, reason and message,
		// then the field each cause names.
		fmt.Fprintf(stderr, "denied:    %d %s: %s\n", resp.Result.Code, resp.Result.Reason, resp.Result.Message)
		if resp.Result.Details != nil {
			for _, cause := range resp.Result.Details.Causes {
				fmt.Fprintln(stderr, "field:    ", cause.Field)
			}
		}
		return errDenied
	}
	if len(resp.Patch) > 0 {
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			return err
		}
		if object, err = patch.Apply(object); err != nil {
			return fmt.Errorf("applying the webhook's patch: %w", err)
		}
	}
	out, err := yaml.JSONToYAML(object)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// readMPIJob converts a YAML or JSON MPIJob to JSON and checks its kind.
func readMPIJob(data []byte) ([]byte, schema.GroupVersionKind, error) {
	object, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, schema.GroupVersionKind{}, fmt.Errorf("neither YAML nor JSON: %w", err)
	}
	var meta struct {
		metav1.TypeMeta
		// ObjectMeta as the API server reads it: an annotation whose YAML
		// value is a number (task-type-version: 1, unquoted) is refused
		// there, and so here, rather than previewed as a job left alone.
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(object, &meta); err != nil {
		return nil, schema.GroupVersionKind{}, fmt.Errorf("not a Kubernetes object the API server would accept "+
			"(quote annotation values that YAML reads as numbers or booleans): %w", err)
	}
	gvk := meta.GroupVersionKind()
	if gvk.Group != mutate.MPIJobGroup || gvk.Kind != mutate.MPIJobKind || !slices.Contains(mutate.MPIJobVersions, gvk.Version) {
		return nil, gvk, fmt.Errorf("is apiVersion %q kind %q; expected an MPIJob of kubeflow.org/v1 or kubeflow.org/v2beta1",
			meta.APIVersion, meta.Kind)
	}
	return object, gvk, nil
}

// previewCreate answers the object's creation as the server would: the
// request the API server would send, through the server's own webhook.
func previewCreate(handler *admission.Handler, object []byte, gvk schema.GroupVersionKind) admissionv1.AdmissionResponse {
	return handler.HandleRequest(&admissionv1.AdmissionRequest{
		UID:       "preview",
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Resource:  metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: mutate.MPIJobResource},
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: object},
	})
}

// printDecision prints the decision and every warning the response carries:
// Decide's, and the handler's own, such as an MPIJob it could not read.
func printDecision(w io.Writer, d mutate.Decision, warnings []string) {
	fmt.Fprintf(w, "outcome:   %s\nsource:    %s\n", d.Outcome, d.Source)
	if d.Container >= 0 {
		fmt.Fprintf(w, "container: %s (worker container %d)\ncommand:   %s\nargs:      %s\n",
			d.ContainerName, d.Container, quotedWords(d.Command), quotedWords(d.Args))
	}
	for _, warning := range warnings {
		fmt.Fprintln(w, "warning:  ", warning)
	}
}

// quotedWords prints w on one line, each word Go-quoted when it is empty
// or holds a blank, a quote or a backslash.
func quotedWords(w []string) string {
	if len(w) == 0 {
		return "(none)"
	}
	quoted := make([]string, len(w))
	for i, s := range w {
		quoted[i] = s
		if s == "" || strings.ContainsAny(s, " \t\n'\"\\") {
			quoted[i] = fmt.Sprintf("%q", s)
		}
	}
	return strings.Join(quoted, " ")
}
