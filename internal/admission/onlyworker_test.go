package admission

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// mayChange matches the only paths the webhook may change in an MPIJob: the
// command and args of one worker container, and the source annotation (or
// the annotations, when the job had none).
var mayChange = regexp.MustCompile(`^(/spec/mpiReplicaSpecs/Worker/template/spec/containers/(\d+)/(command|args)|` +
	`/metadata/annotations/mpi\.flyte\.org~1worker-command-source|/metadata/annotations)$`)

// checkOnlyWorkerCommandChanged fails unless every difference between two
// objects is at a path mayChange allows, in one container only, and a new
// annotations map holds the source annotation alone.
func checkOnlyWorkerCommandChanged(t testing.TB, before, after []byte) {
	t.Helper()
	var b, a any
	if err := json.Unmarshal(before, &b); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(after, &a); err != nil {
		t.Fatal(err)
	}
	container := ""
	for _, path := range changedPaths(b, a, "") {
		m := mayChange.FindStringSubmatch(path)
		switch {
		case m == nil:
			t.Fatalf("the webhook changed %s", path)
		case m[2] != "" && container != "" && m[2] != container:
			t.Fatalf("the webhook changed containers %s and %s", container, m[2])
		case m[2] != "":
			container = m[2]
		case path == "/metadata/annotations":
			annotations, _ := a.(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)
			if len(annotations) != 1 || annotations[mutate.AnnotationWorkerCommandSource] == nil {
				t.Fatalf("the webhook set the annotations to %v", annotations)
			}
		}
	}
}

// changedPaths lists the JSON pointers at which two decoded JSON documents differ.
func changedPaths(before, after any, path string) []string {
	if reflect.DeepEqual(before, after) {
		return nil
	}
	switch b := before.(type) {
	case map[string]any:
		a, ok := after.(map[string]any)
		if !ok {
			return []string{path}
		}
		var paths []string
		for k := range b {
			paths = append(paths, changedPaths(b[k], a[k], path+"/"+escape(k))...)
		}
		for k := range a {
			if _, ok := b[k]; !ok {
				paths = append(paths, path+"/"+escape(k))
			}
		}
		return paths
	case []any:
		a, ok := after.([]any)
		if !ok || len(a) != len(b) {
			return []string{path}
		}
		var paths []string
		for i := range b {
			paths = append(paths, changedPaths(b[i], a[i], path+"/"+strconv.Itoa(i))...)
		}
		return paths
	}
	return []string{path}
}

func escape(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }

// TestNoAnnotationTouchesAnythingElse runs a worker with everything a pod
// template can hold past annotation values meant to reach it, and checks
// that only the worker command and the source annotation ever change.
func TestNoAnnotationTouchesAnythingElse(t *testing.T) {
	rich := func(job map[string]any) {
		worker := job["spec"].(map[string]any)["mpiReplicaSpecs"].(map[string]any)["Worker"].(map[string]any)
		spec := worker["template"].(map[string]any)["spec"].(map[string]any)
		mpi := spec["containers"].([]any)[0].(map[string]any)
		mpi["securityContext"] = map[string]any{"runAsNonRoot": true, "capabilities": map[string]any{"drop": []any{"ALL"}}}
		mpi["volumeMounts"] = []any{map[string]any{"name": "ssh", "mountPath": "/home/jobuser/.ssh"}}
		spec["containers"] = append(spec["containers"].([]any), map[string]any{"name": "sidecar", "image": "envoy", "command": []any{"envoy"}})
		spec["initContainers"] = []any{map[string]any{"name": "init", "image": "busybox", "command": []any{"true"}}}
		spec["volumes"] = []any{map[string]any{"name": "ssh", "secret": map[string]any{"secretName": "ssh"}}}
	}
	values := []map[string]string{
		{mutate.AnnotationTaskCustom: flytekitCustom},
		{mutate.AnnotationTaskCustom: `{"workerReplicas":{"image":"evil:latest","command":["/bin/sh","-c","id"],"resources":{"limits":[{"name":"CPU","value":"64"}]}},"launcherReplicas":{"command":["x"]}}`},
		{mutate.AnnotationTaskCustom: `{"workerReplicas":{"command":["sshd"]},"securityContext":{"privileged":true},"volumes":[{"hostPath":"/"}]}`},
		{mutate.AnnotationWorkerSpecCommand: `sshd "--x=$(HOME)" '}]},{"op":"add","path":"/spec/x","value":1}'`},
		{mutate.AnnotationWorkerSpecCommand: `/spec/mpiReplicaSpecs/Launcher/template/spec/containers/0/command`},
		{mutate.AnnotationTaskCustom: `{"workerReplicas":{"command":["~1","/","~0"]}}`},
	}
	for i, annotations := range values {
		for _, mode := range mutate.InjectModes {
			t.Run(strconv.Itoa(i)+"/"+string(mode), func(t *testing.T) {
				object := sampleJob(t, "v2beta1", func(job map[string]any) {
					rich(job)
					for k, v := range annotations {
						annotate(k, v)(job)
					}
				})
				opts := mutate.DefaultOptions()
				opts.InjectAs = mode
				resp := responseTo(t, NewHandler(opts, DefaultLimits(), nil), reviewOf(t, "v2beta1", "CREATE", object))
				if !resp.Allowed || len(resp.Patch) == 0 {
					t.Fatalf("want a patch, got %+v", resp)
				}
				checkOnlyWorkerCommandChanged(t, object, applyPatch(t, object, resp))
			})
		}
	}
}
