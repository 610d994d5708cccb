package mutate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	legacympi "github.com/flyteorg/flyteidl/gen/pb-go/flyteidl/plugins"
	kubeflowmpi "github.com/flyteorg/flyteidl/gen/pb-go/flyteidl/plugins/kubeflow"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Task type versions of Flyte's MPI task, as the annotation AnnotationTaskTypeVersion spells them.
const (
	// TaskTypeVersionLegacy is flyteidl.plugins.DistributedMPITrainingTask, which carries no command.
	TaskTypeVersionLegacy = "0"
	// TaskTypeVersionKubeflow is flyteidl.plugins.kubeflow.DistributedMPITrainingTask.
	TaskTypeVersionKubeflow = "1"
)

var (
	kubeflowTask = protoadapt.MessageV2Of(&kubeflowmpi.DistributedMPITrainingTask{}).ProtoReflect().Descriptor()
	legacyTask   = protoadapt.MessageV2Of(&legacympi.DistributedMPITrainingTask{}).ProtoReflect().Descriptor()

	// kubeflowOnlyFields and legacyOnlyFields tell the two messages apart by the
	// names of their fields, in both spellings protobuf JSON accepts.
	kubeflowOnlyFields = fieldNamesNotIn(kubeflowTask, legacyTask)
	legacyOnlyFields   = fieldNamesNotIn(legacyTask, kubeflowTask)

	// unmarshalJSON ignores what this flyteidl does not know: newer flytekit
	// writes fields (workerReplicas.common) that are no reason to deny a job.
	unmarshalJSON   = protojson.UnmarshalOptions{DiscardUnknown: true}
	unmarshalBinary = proto.UnmarshalOptions{DiscardUnknown: true}
)

// decodeTaskCustom returns the worker command that a serialized task custom
// carries, or nil when it carries none. typeVersion is the value of
// AnnotationTaskTypeVersion, empty when absent.
func decodeTaskCustom(value, typeVersion string) ([]string, error) {
	// A UTF-8 byte order mark, as some editors write, is no part of the JSON.
	value = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(value), "\ufeff"))
	if value == "" {
		return nil, errors.New("is empty; expected the task custom as JSON or as base64 protobuf")
	}
	if value[0] == '{' {
		if typeVersion == "" {
			var err error
			if typeVersion, err = detectTypeVersion([]byte(value)); err != nil {
				return nil, err
			}
		}
		task := newTask(typeVersion)
		if err := unmarshalProtoJSON([]byte(value), task); err != nil {
			return nil, err
		}
		return workerCommandOf(task), nil
	}
	raw, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		return nil, fmt.Errorf("is neither a JSON object nor standard base64: %w", err)
	}
	task := newTask(typeVersion)
	name := task.ProtoReflect().Descriptor().FullName()
	if err := unmarshalBinary.Unmarshal(raw, task); err != nil {
		return nil, fmt.Errorf("base64 protobuf of %s: %w", name, err)
	}
	if proto.Size(task) == 0 {
		// Bytes that hold only fields this flyteidl does not know are no task
		// custom at all: most likely another message, or not protobuf.
		return nil, fmt.Errorf("base64 protobuf of %s: its %d bytes hold no field of that message", name, len(raw))
	}
	return workerCommandOf(task), nil
}

// detectTypeVersion picks the task message whose own field names the JSON
// uses; the kubeflow message when the JSON uses neither's.
func detectTypeVersion(value []byte) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(value, &fields); err != nil {
		return "", fmt.Errorf("invalid JSON: %w", err)
	}
	if !hasAnyKey(fields, kubeflowOnlyFields) && hasAnyKey(fields, legacyOnlyFields) {
		return TaskTypeVersionLegacy, nil
	}
	return TaskTypeVersionKubeflow, nil
}

// newTask returns an empty task message of the given type version.
func newTask(typeVersion string) proto.Message {
	if typeVersion == TaskTypeVersionLegacy {
		return protoadapt.MessageV2Of(&legacympi.DistributedMPITrainingTask{})
	}
	return protoadapt.MessageV2Of(&kubeflowmpi.DistributedMPITrainingTask{})
}

// workerCommandOf returns the worker command of a task message; the legacy message has none.
func workerCommandOf(task proto.Message) []string {
	if t, ok := protoadapt.MessageV1Of(task).(*kubeflowmpi.DistributedMPITrainingTask); ok {
		return t.GetWorkerReplicas().GetCommand()
	}
	return nil
}

// unmarshalProtoJSON decodes protobuf JSON into msg. Its error names the
// offending field where it can: protojson only gives a position.
func unmarshalProtoJSON(value []byte, m proto.Message) error {
	err := unmarshalJSON.Unmarshal(value, m)
	if err == nil {
		return nil
	}
	var generic any
	decoder := json.NewDecoder(bytes.NewReader(value))
	decoder.UseNumber()
	if decoder.Decode(&generic) != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if msg := explainJSON(m.ProtoReflect().Descriptor(), generic, ""); msg != "" {
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
}

// explainJSON returns a message naming the first field of v whose JSON type
// does not fit descriptor md, or "" when it finds none.
func explainJSON(md protoreflect.MessageDescriptor, v any, path string) string {
	object, ok := v.(map[string]any)
	if !ok {
		return describeWant(path, "an object")
	}
	keys := make([]string, 0, len(object))
	for k := range object {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic: the same input always names the same field
	for _, k := range keys {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByTextName(k)
		}
		if fd == nil || object[k] == nil {
			continue // unknown fields are discarded, and null means the default
		}
		if msg := explainField(fd, object[k], joinPath(path, k)); msg != "" {
			return msg
		}
	}
	return ""
}

func explainField(fd protoreflect.FieldDescriptor, v any, path string) string {
	switch {
	case fd.IsList():
		list, ok := v.([]any)
		if !ok {
			return describeWant(path, "a list of "+kindNoun(fd)+"s")
		}
		for i, e := range list {
			if msg := explainValue(fd, e, fmt.Sprintf("%s[%d]", path, i)); msg != "" {
				return msg
			}
		}
	case fd.IsMap():
		object, ok := v.(map[string]any)
		if !ok {
			return describeWant(path, "an object")
		}
		for k, e := range object {
			if msg := explainValue(fd.MapValue(), e, joinPath(path, k)); msg != "" {
				return msg
			}
		}
	default:
		return explainValue(fd, v, path)
	}
	return ""
}

func explainValue(fd protoreflect.FieldDescriptor, v any, path string) string {
	var ok bool
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if strings.HasPrefix(string(fd.Message().FullName()), "google.protobuf.") {
			return "" // well-known types have JSON forms of their own
		}
		return explainJSON(fd.Message(), v, path)
	case protoreflect.StringKind, protoreflect.BytesKind:
		_, ok = v.(string)
	case protoreflect.BoolKind:
		_, ok = v.(bool)
	case protoreflect.EnumKind:
		switch v.(type) {
		case string, json.Number:
			ok = true
		}
	default: // numbers, which protobuf JSON also accepts as strings
		switch n := v.(type) {
		case json.Number:
			ok = true
		case string:
			_, err := strconv.ParseFloat(n, 64)
			ok = err == nil
		}
	}
	if ok {
		return ""
	}
	return describeWant(path, withArticle(kindNoun(fd)))
}

func kindNoun(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "object"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "string"
	case protoreflect.BoolKind:
		return "boolean"
	case protoreflect.EnumKind:
		return "enum name"
	default:
		return "number"
	}
}

func describeWant(path, want string) string {
	if path == "" {
		return "expected " + want
	}
	return path + ": expected " + want
}

func withArticle(noun string) string {
	if strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// fieldNamesNotIn lists the field names of md, in protobuf and JSON spelling,
// that other does not have.
func fieldNamesNotIn(md, other protoreflect.MessageDescriptor) []string {
	var names []string
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		for _, name := range []string{string(fd.Name()), fd.JSONName()} {
			if other.Fields().ByTextName(name) == nil && other.Fields().ByJSONName(name) == nil && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

func hasAnyKey(fields map[string]json.RawMessage, names []string) bool {
	for _, name := range names {
		if _, ok := fields[name]; ok {
			return true
		}
	}
	return false
}
