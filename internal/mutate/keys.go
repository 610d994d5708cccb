package mutate

import (
	"reflect"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
)

// DecodeJob decodes an MPIJob as the API server sends it, keeping only what
// Decide reads with selector: of the labels, those the selector reads; of
// the annotations, this webhook's (Annotations); of each replica's
// containers, the first MaxContainers (Containers). Every other label,
// annotation and container is skipped without being allocated, so that a
// review costs about what its bytes do, whatever they hold.
func DecodeJob(raw []byte, selector labels.Selector) (*Job, error) {
	return decodeJob(raw, labelDecoder(selector))
}

func decodeJob(raw []byte, labelsRead keyDecoder) (*Job, error) {
	var job Job
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &job); err != nil {
		return nil, err
	}
	selected, err := labelsRead.decode(raw)
	if err != nil {
		return nil, err
	}
	job.Metadata.Labels = selected
	return &job, nil
}

// labelDecoder decodes an MPIJob's labels that selector reads.
func labelDecoder(selector labels.Selector) keyDecoder {
	requirements, _ := selector.Requirements()
	var keys []string
	for _, r := range requirements {
		if !slices.Contains(keys, r.Key()) {
			keys = append(keys, r.Key())
		}
	}
	return newKeyDecoder(keys, "metadata", "labels")
}

// keyDecoder decodes the string values of keys in the JSON object at a path:
// into a struct type made for those keys, which skips every other member of
// the object unread, where a map would hold them all.
type keyDecoder struct {
	keys  []string
	typ   reflect.Type
	depth int
}

func newKeyDecoder(keys []string, path ...string) keyDecoder {
	fields := make([]reflect.StructField, len(keys))
	for i, key := range keys {
		// Label keys and this webhook's annotation keys hold no quote or comma, which a tag cannot.
		fields[i] = reflect.StructField{Name: "K" + strconv.Itoa(i), Type: reflect.TypeFor[*string](),
			Tag: reflect.StructTag(`json:"` + key + `"`)}
	}
	typ := reflect.StructOf(fields)
	for _, name := range slices.Backward(path) {
		typ = reflect.StructOf([]reflect.StructField{{Name: "K", Type: typ, Tag: reflect.StructTag(`json:"` + name + `"`)}})
	}
	return keyDecoder{keys: keys, typ: typ, depth: len(path)}
}

// decode returns the keys' values found in raw.
func (d keyDecoder) decode(raw []byte) (map[string]string, error) {
	decoded := reflect.New(d.typ)
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, decoded.Interface()); err != nil {
		return nil, err
	}
	values := decoded.Elem()
	for range d.depth {
		values = values.Field(0)
	}
	found := map[string]string{}
	for i, key := range d.keys {
		if value := values.Field(i).Interface().(*string); value != nil {
			found[key] = *value
		}
	}
	return found, nil
}

// annotations decodes the annotations Decide reads, made once: reflect.StructOf costs more than a decode.
var annotations = newKeyDecoder([]string{AnnotationTaskCustom, AnnotationTaskTypeVersion,
	AnnotationWorkerSpecCommand, AnnotationWorkerCommandSource})

// Annotations are an object's or a pod template's annotations, as far as
// Decide reads them: this webhook's keys. A present annotations object is
// never nil, for the patch adds the source annotation to it.
type Annotations map[string]string

// UnmarshalJSON decodes this webhook's annotations from a JSON object and skips the others unread.
func (a *Annotations) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*a = nil
		return nil
	}
	found, err := annotations.decode(data)
	*a = found
	return err
}
