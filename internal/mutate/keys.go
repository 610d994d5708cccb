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
	var job Job
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &job); err != nil {
		return nil, err
	}
	requirements, _ := selector.Requirements()
	var keys []string
	for _, r := range requirements {
		if !slices.Contains(keys, r.Key()) {
			keys = append(keys, r.Key())
		}
	}
	selected, err := decodeKeys(raw, keys, "metadata", "labels")
	if err != nil {
		return nil, err
	}
	job.Metadata.Labels = selected
	return &job, nil
}

// decodeKeys returns the string values of keys in the JSON object at path
// in raw. It decodes raw into a struct type made for keys, which skips every
// other member of the object unread; a map would hold them all.
func decodeKeys(raw []byte, keys []string, path ...string) (map[string]string, error) {
	fields := make([]reflect.StructField, len(keys))
	for i, key := range keys {
		// Label keys and this webhook's annotation keys hold no quote or comma, which a tag cannot.
		fields[i] = reflect.StructField{Name: "K" + strconv.Itoa(i), Type: reflect.TypeFor[*string](),
			Tag: reflect.StructTag(`json:"` + key + `"`)}
	}
	object := reflect.StructOf(fields)
	for _, name := range slices.Backward(path) {
		object = reflect.StructOf([]reflect.StructField{{Name: "K", Type: object, Tag: reflect.StructTag(`json:"` + name + `"`)}})
	}
	decoded := reflect.New(object)
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, decoded.Interface()); err != nil {
		return nil, err
	}
	values := decoded.Elem()
	for range path {
		values = values.Field(0)
	}
	found := map[string]string{}
	for i, key := range keys {
		if value := values.Field(i).Interface().(*string); value != nil {
			found[key] = *value
		}
	}
	return found, nil
}

// annotationKeys are the annotations Decide reads.
var annotationKeys = []string{AnnotationTaskCustom, AnnotationTaskTypeVersion, AnnotationWorkerSpecCommand, AnnotationWorkerCommandSource}

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
	found, err := decodeKeys(data, annotationKeys)
	*a = found
	return err
}
