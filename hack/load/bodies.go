//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
)

// builtInBodies returns, for each MPIJob version, the AdmissionReview the API
// server sends when Flyte creates testdata/mpijob-VERSION.yaml with the task
// custom flytekit writes: the bodies of internal/admission's benchmark.
func builtInBodies(testdata string) ([][]byte, error) {
	var bodies [][]byte
	for _, version := range []string{"v1", "v2beta1"} {
		job, err := framework.ReadJob(filepath.Join(testdata, "mpijob-"+version+".yaml"))
		if err != nil {
			return nil, err
		}
		annotations := job.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[mutate.AnnotationTaskCustom] = framework.FlytekitCustom
		job.SetAnnotations(annotations)
		object, err := job.MarshalJSON()
		if err != nil {
			return nil, err
		}
		body, err := json.Marshal(map[string]any{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
			"request": map[string]any{
				"uid":       "705ab4f5-6393-11e8-b7cc-42010a800002",
				"kind":      map[string]string{"group": "kubeflow.org", "version": version, "kind": "MPIJob"},
				"resource":  map[string]string{"group": "kubeflow.org", "version": version, "resource": "mpijobs"},
				"namespace": job.GetNamespace(),
				"operation": "CREATE",
				"userInfo":  map[string]any{"username": "system:serviceaccount:flyte:flytepropeller"},
				"object":    json.RawMessage(object),
				"dryRun":    false,
			},
		})
		if err != nil {
			return nil, err
		}
		bodies = append(bodies, body)
	}
	return bodies, nil
}

// readBodies reads AdmissionReview bodies from files.
func readBodies(paths []string) ([][]byte, error) {
	var bodies [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if !json.Valid(b) {
			return nil, fmt.Errorf("%s: not JSON", p)
		}
		bodies = append(bodies, b)
	}
	return bodies, nil
}
