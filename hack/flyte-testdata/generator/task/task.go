// Package task decodes the generator's tasks (generator.Case) with the
// flyteidl of the release whose tools module compiles it.
package task

import (
	"fmt"
	"regexp"
	"strings"

	protov1 "github.com/golang/protobuf/proto" //nolint:staticcheck // MessageV2 reads the older releases' flyteidl, generated for it
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"

	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator"
)

// unknownFieldPosition is where protojson's error says the unknown field was.
var unknownFieldPosition = regexp.MustCompile(`\(line \d+:\d+\): `)

// Decode decodes the case's TaskTemplate with this release's flyteidl. A
// field that this flyteidl lacks is dropped, as flyteadmin's protobuf
// decoding drops it, and named in the notes.
func Decode(c generator.Case) (*core.TaskTemplate, []string, error) {
	b, err := c.TaskJSON()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &core.TaskTemplate{}
	strict := protojson.Unmarshal(b, protov1.MessageV2(tmpl))
	if strict == nil {
		return tmpl, nil, nil
	}
	tmpl = &core.TaskTemplate{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, protov1.MessageV2(tmpl)); err != nil {
		return nil, nil, fmt.Errorf("decoding the TaskTemplate of case %s: %w", c.Name, err)
	}
	// protojson varies the spaces of its messages on purpose; the header is not to.
	why := strings.Join(strings.Fields(unknownFieldPosition.ReplaceAllString(strict.Error(), "")), " ")
	return tmpl, []string{"This release's flyteidl drops what it does not know of the TaskTemplate: " + why + "."}, nil
}

// K8sMetadata returns the labels and annotations of the task's
// TaskMetadata.metadata (@task(labels=..., annotations=...)), on the releases
// whose flyteidl has that field; read by name, so that one source serves
// every release.
func K8sMetadata(tmpl *core.TaskTemplate) (labels, annotations map[string]string) {
	if tmpl.GetMetadata() == nil {
		return nil, nil
	}
	md := protov1.MessageV2(tmpl.GetMetadata()).ProtoReflect()
	field := md.Descriptor().Fields().ByName("metadata")
	if field == nil || !md.Has(field) {
		return nil, nil
	}
	k8s := md.Get(field).Message()
	read := func(name string) map[string]string {
		f := k8s.Descriptor().Fields().ByName(protoreflect.Name(name))
		if f == nil || !f.IsMap() {
			return nil
		}
		out := map[string]string{}
		k8s.Get(f).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			out[k.String()] = v.String()
			return true
		})
		return out
	}
	return read("labels"), read("annotations")
}
