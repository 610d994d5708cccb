package mutate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"

	"github.com/go-openapi/jsonpointer"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Job is the part of an MPIJob that Decide reads. kubeflow.org/v1 and
// kubeflow.org/v2beta1 agree on every path in it, and every field the webhook
// does not read is left out, so decoding skips it and the patch never
// rewrites it.
type Job struct {
	APIVersion string   `json:"apiVersion,omitempty"`
	Kind       string   `json:"kind,omitempty"`
	Metadata   Metadata `json:"metadata"`
	Spec       JobSpec  `json:"spec"`
}

// Metadata is the part of an object's or a pod template's metadata that Decide reads.
type Metadata struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// JobSpec holds the MPIJob's replica specs.
type JobSpec struct {
	MPIReplicaSpecs ReplicaSpecs `json:"mpiReplicaSpecs"`
}

// ReplicaSpecs holds the one replica type the webhook changes.
type ReplicaSpecs struct {
	Worker *ReplicaSpec `json:"Worker,omitempty"`
}

// ReplicaSpec is a replica type's pod template.
type ReplicaSpec struct {
	Template PodTemplate `json:"template"`
}

// PodTemplate is a replica's pod template.
type PodTemplate struct {
	Metadata TemplateMetadata `json:"metadata"`
	Spec     PodSpec          `json:"spec"`
}

// TemplateMetadata is the part of a pod template's metadata that Decide
// reads: the annotations. Its labels are skipped unread.
type TemplateMetadata struct {
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PodSpec holds the containers of a pod template.
type PodSpec struct {
	Containers []Container `json:"containers"`
}

// Container is a container's name, command and args.
type Container struct {
	Name    string `json:"name"`
	Command Words  `json:"command"`
	Args    Words  `json:"args"`
}

// Words is a container's command or args. It remembers whether the field was
// present at all, so that a patch removes only what exists. Decoded from
// JSON, it checks that the field is a list of strings and keeps the list as
// it came, decoding its values only when they are compared with a list of
// the same length: the worker's args, the task's long command line, are
// usually only removed.
type Words struct {
	Present bool
	Values  []string

	raw []byte // the JSON list, not yet decoded into Values
	n   int    // the number of strings in raw
}

// UnmarshalJSON records that the field was present, even as null.
func (w *Words) UnmarshalJSON(b []byte) error {
	n, err := countStrings(b)
	if err != nil {
		return err
	}
	*w = Words{Present: true}
	if n > 0 {
		w.raw, w.n = bytes.Clone(b), n
	}
	return nil
}

// Strings returns the words.
func (w Words) Strings() []string {
	if w.raw == nil {
		return w.Values
	}
	var values []string
	_ = json.Unmarshal(w.raw, &values) // countStrings checked it
	return values
}

// Equal reports whether w holds exactly values.
func (w Words) Equal(values []string) bool {
	if w.raw == nil {
		return slices.Equal(w.Values, values)
	}
	return w.n == len(values) && slices.Equal(w.Strings(), values)
}

// MarshalJSON writes the words as a JSON list, or null when absent.
func (w Words) MarshalJSON() ([]byte, error) {
	if !w.Present {
		return []byte("null"), nil
	}
	return json.Marshal(w.Strings())
}

// countStrings checks that b is JSON null or a list of strings (or nulls),
// without decoding them, and counts them. b is valid JSON: the decoder that
// calls UnmarshalJSON has checked it.
func countStrings(b []byte) (int, error) {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return 0, nil
	}
	notList := &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[[]string]()}
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return 0, notList
	}
	n, i := 0, skipSpace(b, 1)
	if i == len(b)-1 {
		return 0, nil // []
	}
	for {
		switch {
		case bytes.HasPrefix(b[i:], []byte("null")):
			i += len("null") - 1 // null is "", as encoding/json decodes it into a string
		case b[i] != '"':
			return 0, &json.UnmarshalTypeError{Value: jsonKind(b[i:]), Type: reflect.TypeFor[string]()}
		default:
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		}
		n, i = n+1, skipSpace(b, i+1)
		switch {
		case i >= len(b):
			return 0, notList
		case b[i] == ']' && i == len(b)-1:
			return n, nil
		case b[i] == ',':
			i = skipSpace(b, i+1)
		default:
			return 0, notList
		}
		if i >= len(b)-1 {
			return 0, notList
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// jsonKind names the kind of the JSON value b starts with, as encoding/json's errors do.
func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "end of input"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// workerContainers is where both MPIJob versions keep the worker's containers.
var workerContainers = []string{"spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers"}

// workerContainersField is workerContainers as a field path, for messages.
var workerContainersField = field.NewPath(workerContainers[0], workerContainers[1:]...)

// jsonPointer joins path segments into an RFC 6901 JSON pointer.
func jsonPointer(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(jsonpointer.Escape(s))
	}
	return b.String()
}
