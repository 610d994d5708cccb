package mutate

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/labels"
)

// FuzzDecodeTaskCustom: any annotation value decodes to a command or to an
// error, never a panic, and the same way every time.
func FuzzDecodeTaskCustom(f *testing.F) {
	for _, seed := range []string{flytekitCustom, snakeCaseCustom, newerCustom, legacyCustom, noCommandCustom,
		binaryCustom(f, workerCommand...), `{"workerReplicas":{"command":"x"}}`, `{"workerReplicas":[]}`, "", "{", "AAAA"} {
		f.Add(seed, "")
		f.Add(seed, "0")
		f.Add(seed, "1")
	}
	f.Fuzz(func(t *testing.T, value, typeVersion string) {
		command, err := decodeTaskCustom(value, typeVersion)
		again, errAgain := decodeTaskCustom(value, typeVersion)
		if (err == nil) != (errAgain == nil) || !slices.Equal(command, again) {
			t.Fatalf("not deterministic: %q %v, then %q %v", command, err, again, errAgain)
		}
	})
}

// FuzzDecide: whatever the annotations and options, Decide never panics,
// denies only with an *AnnotationError, patches only the worker container's
// command and args and the source annotation, and applied to its own output
// changes nothing more.
func FuzzDecide(f *testing.F) {
	f.Add(flytekitCustom, "", "", "mpi", uint8(0), false, false, "", "")
	f.Add(legacyCustom, "0", flytekitSpecCommand, "mpi", uint8(1), true, false, "", "")
	f.Add(binaryCustom(f, "/usr/sbin/sshd", "-De"), "1", "", "worker", uint8(2), false, true, "", "")
	f.Add("", "", "a 'b c' \"d\" e\\ f", "", uint8(0), true, true, "", "")
	f.Add(`{"workerReplicas":{"command":["", "\u0000"]}}`, "7", "a;b", "mpi", uint8(3), false, false, "", "")
	f.Add("", "", "", "mpi", uint8(0), false, false, flytekitSpecCommand, "")
	f.Add("", "", "", "mpi", uint8(1), false, true, flytekitSpecCommand, "/bin/true")
	f.Add("", "", "", "mpi", uint8(2), false, false, "pyflyte-execute x", "/bin/true -x")
	f.Add("", "", "", "mpi", uint8(0), false, false, "", flytekitSpecCommand)
	f.Add("", "", "", "mpi", uint8(1), false, false, "horovodrun -np 2", "/bin/true")
	f.Add("", "", "", "mpi", uint8(2), false, false, "/bin/horovodrun x", "")
	f.Add("", "", "", "mpi", uint8(0), false, false, " /usr/sbin/sshd -De", "")
	f.Fuzz(func(t *testing.T, custom, typeVersion, specCommand, containerName string, mode uint8, onWorker, sidecarFirst bool,
		workerArgs, fallback string) {
		b := flyteJob()
		set := b.annotation
		if onWorker {
			set = b.workerAnnotation
		}
		for key, value := range map[string]string{AnnotationTaskCustom: custom, AnnotationTaskTypeVersion: typeVersion,
			AnnotationWorkerSpecCommand: specCommand} {
			if value != "" {
				set(key, value)
			}
		}
		if workerArgs != "" {
			// A declared worker command, as Flyte writes it: its legacy tasks split a line on
			// single spaces, so a blank at the start or two in a row make an empty word.
			b.workerArgs(strings.Split(workerArgs, " ")...)
		}
		if sidecarFirst {
			b.containers(Container{Name: "sidecar", Command: list("envoy")}, Container{Name: "mpi", Args: list(taskArgs...)})
		}
		opts := DefaultOptions()
		opts.FallbackCommand = strings.Fields(fallback)
		opts.ContainerName = containerName
		opts.InjectAs = InjectModes[int(mode)%len(InjectModes)]
		job := b.obj()

		d := Decide(job, opts)
		switch d.Outcome {
		case OutcomeDeniedInvalid:
			var annotationErr *AnnotationError
			if !errors.As(d.Err, &annotationErr) || !strings.HasPrefix(annotationErr.Key, "mpi.flyte.org/") {
				t.Fatalf("denied with %v; want an *AnnotationError", d.Err)
			}
			return
		case OutcomeMutated:
		default:
			if len(d.Patch) > 0 {
				t.Fatalf("outcome %s with a patch %v", d.Outcome, d.Patch)
			}
			return
		}
		checkPatchPaths(t, d)

		patched := applyToJob(t, job, d)
		if command := words(patched.Spec.MPIReplicaSpecs.Worker.mpiContainer().Command); len(command) > 0 && command[0] == "" {
			t.Fatalf("a worker command no runtime can start: %q", command)
		}
		if again := Decide(patched, opts); again.Outcome != OutcomeUnchanged || len(again.Patch) > 0 {
			t.Fatalf("not idempotent: the second decision is %s with %v", again.Outcome, again.Patch)
		}
	})
}

// checkPatchPaths fails unless every operation of d's patch is one of the few the webhook may make.
func checkPatchPaths(t *testing.T, d Decision) {
	t.Helper()
	container := jsonPointer("spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers", strconv.Itoa(d.Container))
	allowed := []string{container + "/command", container + "/args", "/metadata/annotations",
		jsonPointer("metadata", "annotations", AnnotationWorkerCommandSource)}
	for _, op := range d.Patch {
		if !slices.Contains(allowed, op.Path) || (op.Operation != "add" && op.Operation != "remove") {
			t.Fatalf("the patch touches %s %s; it may only touch %v", op.Operation, op.Path, allowed)
		}
		if op.Path == "/metadata/annotations" {
			want := map[string]string{AnnotationWorkerCommandSource: string(d.Source)}
			if got, ok := op.Value.(map[string]string); !ok || len(got) != 1 || got[AnnotationWorkerCommandSource] != want[AnnotationWorkerCommandSource] {
				t.Fatalf("the patch sets annotations to %v; want only %v", op.Value, want)
			}
		}
	}
}

// applyToJob applies d's patch to job's JSON, as the API server would.
func applyToJob(t *testing.T, job *Job, d Decision) *Job {
	t.Helper()
	doc, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := json.Marshal(d.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("the patch %s does not apply to %s: %v", ops, doc, err)
	}
	patched, err := NewJobDecoder(labels.Everything()).Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	patched.Metadata.Labels = job.Metadata.Labels // not encoded (JobDecoder reads them), and never patched
	return patched
}
