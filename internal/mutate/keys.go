package mutate

import (
	"fmt"
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
	// A Job whose metadata keeps the labels object as sent: its Metadata and
	// Labels shadow the ones they embed.
	var decoded struct {
		Job
		Metadata struct {
			Metadata
			Labels rawObject `json:"labels"`
		} `json:"metadata"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &decoded); err != nil {
		return nil, err
	}
	selected, err := labelsRead.decode(decoded.Metadata.Labels)
	if err != nil {
		return nil, fmt.Errorf("metadata.labels: %w", err)
	}
	job := decoded.Job
	job.Metadata = decoded.Metadata.Metadata
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
	return newKeyDecoder(keys)
}

// keyDecoder decodes the string values of keys in a JSON object: into a
// struct type made for those keys, which skips every other member of the
// object unread, where a map would hold them all.
type keyDecoder struct {
	keys []string
	typ  reflect.Type
}

func newKeyDecoder(keys []string) keyDecoder {
	fields := make([]reflect.StructField, len(keys))
	for i, key := range keys {
		// Label keys and this webhook's annotation keys hold no quote or comma, which a tag cannot.
		fields[i] = reflect.StructField{Name: "K" + strconv.Itoa(i), Type: reflect.TypeFor[*string](),
			Tag: reflect.StructTag(`json:"` + key + `"`)}
	}
	return keyDecoder{keys: keys, typ: reflect.StructOf(fields)}
}

// decode returns the keys' values found in the JSON object raw; none when raw is empty or null.
func (d keyDecoder) decode(raw []byte) (map[string]string, error) {
	found := map[string]string{}
	if len(raw) == 0 {
		return found, nil
	}
	decoded := reflect.New(d.typ)
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, decoded.Interface()); err != nil {
		return nil, err
	}
	for i, key := range d.keys {
		if value := decoded.Elem().Field(i).Interface().(*string); value != nil {
			found[key] = *value
		}
	}
	return found, nil
}

// rawObject is a JSON value as it was sent, kept by reference to the input
// being decoded: decodeJob reads it before it returns, while the input is alive.
type rawObject []byte

// UnmarshalJSON keeps data.
func (r *rawObject) UnmarshalJSON(data []byte) error {
	*r = data
	return nil
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
