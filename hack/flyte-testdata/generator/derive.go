package generator

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// JobMap decodes an MPIJob's JSON, without the fields a create request
// never carries: the zero creationTimestamp the Go types always encode, and
// the empty status.
func JobMap(job []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(job, &m); err != nil {
		return nil, fmt.Errorf("decoding an MPIJob: %w", err)
	}
	delete(m, "status")
	dropNullCreationTimestamp(m)
	return m, nil
}

// dropNullCreationTimestamp removes every "creationTimestamp": null, which
// metav1.ObjectMeta encodes for a zero time, from the object and its pod
// templates.
func dropNullCreationTimestamp(v any) {
	switch t := v.(type) {
	case map[string]any:
		if ts, ok := t["creationTimestamp"]; ok && ts == nil {
			delete(t, "creationTimestamp")
		}
		for _, child := range t {
			dropNullCreationTimestamp(child)
		}
	case []any:
		for _, child := range t {
			dropNullCreationTimestamp(child)
		}
	}
}

// The fields of mpi-operator v0.8.2's kubeflow.org/v2beta1 types that a
// kubeflow.org/v1 MPIJob can carry over unchanged: the v2beta1 field of the
// same name has the same meaning and encoding.
var (
	v2beta1SpecFields      = set("slotsPerWorker", "runPolicy", "mpiReplicaSpecs")
	v2beta1RunPolicyFields = set("cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
		"backoffLimit", "schedulingPolicy", "suspend", "managedBy")
	v2beta1ReplicaFields = set("replicas", "template", "restartPolicy")
	// v1SpecFieldsWithoutV2beta1 are the v1 spec fields v2beta1 lacks:
	// cleanPodPolicy moved into runPolicy, mainContainer has no equivalent.
	v1SpecFieldsWithoutV2beta1 = set("cleanPodPolicy", "mainContainer")
)

func set(keys ...string) map[string]bool {
	s := make(map[string]bool, len(keys))
	for _, k := range keys {
		s[k] = true
	}
	return s
}

// deriveV2beta1 maps a kubeflow.org/v1 MPIJob to mpi-operator v0.8.2's
// kubeflow.org/v2beta1: the same metadata, slotsPerWorker, runPolicy and
// replica specs. A v1 field that v2beta1 lacks is dropped only when it is
// known to be absent from v2beta1; any other unknown field is an error, so
// that a newer Flyte cannot slip a field past the derivation.
func deriveV2beta1(v1 map[string]any) (map[string]any, error) {
	spec, ok := v1["spec"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("spec is %T, want an object", v1["spec"])
	}
	out := map[string]any{}
	for k, v := range v1 {
		out[k] = v
	}
	out["apiVersion"] = "kubeflow.org/v2beta1"

	v2spec := map[string]any{}
	for _, k := range sortedKeys(spec) {
		switch {
		case v1SpecFieldsWithoutV2beta1[k]:
			continue
		case !v2beta1SpecFields[k]:
			return nil, fmt.Errorf("spec.%s has no kubeflow.org/v2beta1 counterpart", k)
		}
		v2spec[k] = spec[k]
	}
	if rp, ok := v2spec["runPolicy"].(map[string]any); ok {
		if err := checkFields("spec.runPolicy", rp, v2beta1RunPolicyFields); err != nil {
			return nil, err
		}
	}
	replicas, ok := v2spec["mpiReplicaSpecs"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("spec.mpiReplicaSpecs is %T, want an object", v2spec["mpiReplicaSpecs"])
	}
	for _, name := range sortedKeys(replicas) {
		if name != "Launcher" && name != "Worker" {
			return nil, fmt.Errorf("spec.mpiReplicaSpecs.%s has no kubeflow.org/v2beta1 counterpart", name)
		}
		rs, ok := replicas[name].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("spec.mpiReplicaSpecs.%s is %T, want an object", name, replicas[name])
		}
		if err := checkFields("spec.mpiReplicaSpecs."+name, rs, v2beta1ReplicaFields); err != nil {
			return nil, err
		}
	}
	out["spec"] = v2spec
	return out, nil
}

func checkFields(path string, m map[string]any, allowed map[string]bool) error {
	var unknown []string
	for _, k := range sortedKeys(m) {
		if !allowed[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%s: fields %s have no kubeflow.org/v2beta1 counterpart", path, strings.Join(unknown, ", "))
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
