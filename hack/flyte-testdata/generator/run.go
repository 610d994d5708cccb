// Package generator is the part of the Flyte testdata generator that every
// Flyte release shares: the tasks as flytekit serializes them (Cases), the
// execution's fixed identity, and the writing of the jobs that a release's
// backend builds (Main). Each release's tools module (hack/flyte-testdata
// for the newest, hack/flyte-testdata/releases/VERSION for the others)
// compiles this package against its own flyteidl, flyteplugins and
// flytepropeller; see ../README.md.
package generator

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// The fixed identity of every generated execution, so that the output is
// byte-for-byte reproducible. The names follow what a sandbox deployment of
// flyteadmin and flytepropeller produce for project flytesnacks, domain
// development.
const (
	Project        = "flytesnacks"
	Domain         = "development"
	ExecutionName  = "f3a1b2c4d5e6g7h8i9j0"
	WorkflowUID    = "0b0f6c4e-6d1a-4c5e-9a3b-2f7e8d9c1a20"
	NodeID         = "n0"
	MetadataPrefix = "s3://my-s3-bucket/metadata/propeller"
	// RawDataPrefix is flyteadmin's raw output location for the execution
	// (its sandbox default).
	RawDataPrefix = "s3://my-s3-bucket/data"
	// Namespace is flyteadmin's default namespace template, {{ project }}-{{ domain }}.
	Namespace = Project + "-" + Domain
	// GeneratedNameMaxLength is flytepropeller's task.IDMaxLength: the mpi
	// plugin sets no GeneratedNameMaxLength of its own.
	GeneratedNameMaxLength = 50
)

// Execution is what the generator needs from flyteadmin for one execution:
// the labels and annotations given to the launch plan or the execution,
// which flyteadmin merges into the FlyteWorkflow's metadata.
type Execution struct {
	Labels      map[string]string
	Annotations map[string]string
	// Namespace is where the task runs; empty for flyteadmin's default, Namespace.
	Namespace string
}

// Built is what a release's backend made of one case.
type Built struct {
	// Job is the kubeflow.org/v1 MPIJob Flyte creates, as JSON.
	Job []byte
	// Notes say where this release's backend saw less of the task than
	// flytekit wrote, for the file's header.
	Notes []string
}

// Backend is one Flyte release's backend, as its tools module builds it.
type Backend struct {
	// Module is the tools module's directory, for the header: hack/flyte-testdata/...
	Module string
	// Releases names the Flyte modules and their release, for the header:
	// "flyteplugins/flytepropeller v1.16.8".
	Releases string
	// Builder says what builds the jobs, for the header.
	Builder string
	// StandInFlyteidl, when set, is the flyteidl release that stands in for
	// this release's, which the Go module proxy does not serve, and
	// FieldsStandInAdds are the TaskTemplate fields (protobuf JSON paths,
	// such as "metadata.metadata") that it has and this release's lacks:
	// they are dropped before the backend decodes the task, as this
	// release's flyteadmin would drop them, and the header says so.
	StandInFlyteidl   string
	FieldsStandInAdds []string
	// Setup does what flytepropeller does at start-up; run once.
	Setup func() error
	// Build runs the backend on one case.
	Build func(ctx context.Context, c Case) (Built, error)
	// CrossCheck, when set, is a second way to build the same jobs, which
	// must build every one alike: on the releases whose flytepropeller is
	// served, the plugin backend (flyteplugins' BuildResource, flytepropeller's
	// part done by the generator) that the other releases use alone.
	CrossCheck func(ctx context.Context, c Case) (Built, error)
}

// Main is the generator's command line: it writes every case's job to
// -out/v1/<case>.yaml and, with -v2beta1, derived from it, to
// -out/v2beta1/<case>.yaml. -cases chooses the cases: Cases (flyte),
// UpstreamCases (upstream) or both (all); -patched names, for the header, the
// patch to flyteplugins that the binary was built with (hack/upstream).
func Main(b Backend) {
	name := filepath.Base(os.Args[0])
	out := flag.String("out", "testdata/flyte", "directory to write v1/ (and v2beta1/) into")
	v2beta1 := flag.Bool("v2beta1", true, "also write v2beta1/, derived from v1/ for mpi-operator v0.8.2")
	cases := flag.String("cases", "flyte", "the cases to build: flyte (Cases), upstream (UpstreamCases) or all")
	patched := flag.String("patched", "", "the patch to flyteplugins this binary was built with, for the header (hack/upstream)")
	flag.Parse()
	if *patched != "" {
		b.Releases += ", flyteplugins patched with " + *patched
	}
	if err := run(context.Background(), b, *out, *v2beta1, *cases); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// selectCases returns the cases -cases names.
func selectCases(which string) ([]Case, error) {
	var all []Case
	if which == "flyte" || which == "all" {
		flyte, err := Cases()
		if err != nil {
			return nil, err
		}
		all = append(all, flyte...)
	}
	if which == "upstream" || which == "all" {
		upstream, err := UpstreamCases()
		if err != nil {
			return nil, err
		}
		all = append(all, upstream...)
	}
	if all == nil {
		return nil, fmt.Errorf("-cases %q: want flyte, upstream or all", which)
	}
	return all, nil
}

func run(ctx context.Context, b Backend, out string, withV2beta1 bool, which string) error {
	all, err := selectCases(which)
	if err != nil {
		return err
	}
	if err := b.Setup(); err != nil {
		return err
	}
	dirs := []string{"v1"}
	if withV2beta1 {
		dirs = append(dirs, "v2beta1")
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(filepath.Join(out, dir), 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", filepath.Join(out, dir), err)
		}
	}
	for _, c := range all {
		var dropped []string
		for _, path := range b.FieldsStandInAdds {
			if dropField(c.Task, strings.Split(path, ".")) {
				dropped = append(dropped, path)
			}
		}
		built, err := b.Build(ctx, c)
		if err != nil {
			return fmt.Errorf("case %s: %w", c.Name, err)
		}
		v1, err := JobMap(built.Job)
		if err != nil {
			return fmt.Errorf("case %s: %w", c.Name, err)
		}
		if b.CrossCheck != nil {
			if err := crossCheck(ctx, b, c, built, v1); err != nil {
				return fmt.Errorf("case %s: %w", c.Name, err)
			}
		}

		header := append([]string{"The MPIJob Flyte creates for the task"}, indent(c.Declaration)...)
		header = append(header,
			"built by "+b.Builder+" from the TaskTemplate flytekit "+c.SDKVersion+" serializes.")
		if len(dropped) > 0 {
			header = append(header, "flyteidl "+b.StandInFlyteidl+" stands in for this release's, which is not served; the TaskTemplate's "+
				strings.Join(dropped, ", ")+", which this release's flyteidl lacks, is dropped, as its flyteadmin drops it.")
		}
		header = append(header, built.Notes...)
		header = append(header,
			"Generated by "+b.Module+" with "+b.Releases+"; do not edit; make testdata regenerates.")
		if err := writeYAML(filepath.Join(out, "v1", c.Name+".yaml"), header, v1); err != nil {
			return err
		}
		if withV2beta1 {
			v2, err := deriveV2beta1(v1)
			if err != nil {
				return fmt.Errorf("case %s: deriving v2beta1: %w", c.Name, err)
			}
			header = append(header[:len(header):len(header)],
				"Flyte creates only kubeflow.org/v1 MPIJobs: derived from ../v1/"+c.Name+".yaml for mpi-operator v0.8.2's kubeflow.org/v2beta1.")
			if err := writeYAML(filepath.Join(out, "v2beta1", c.Name+".yaml"), header, v2); err != nil {
				return err
			}
		}
		fmt.Fprintf(os.Stderr, "%s: wrote %s\n", filepath.Base(os.Args[0]), c.Name)
	}
	return nil
}

// crossCheck builds the case with b.CrossCheck and fails, with both jobs,
// unless it builds what b.Build built.
func crossCheck(ctx context.Context, b Backend, c Case, built Built, v1 map[string]any) error {
	other, err := b.CrossCheck(ctx, c)
	if err != nil {
		return fmt.Errorf("the cross-check backend: %w", err)
	}
	otherV1, err := JobMap(other.Job)
	if err != nil {
		return fmt.Errorf("the cross-check backend: %w", err)
	}
	want, err := yaml.Marshal(v1)
	if err != nil {
		return err
	}
	got, err := yaml.Marshal(otherV1)
	if err != nil {
		return err
	}
	if !bytes.Equal(want, got) || strings.Join(built.Notes, "\n") != strings.Join(other.Notes, "\n") {
		return fmt.Errorf("the cross-check backend builds another job:\n%s\n%s\nthan the backend:\n%s\n%s",
			strings.Join(other.Notes, "\n"), got, strings.Join(built.Notes, "\n"), want)
	}
	return nil
}

// dropField deletes the field at path from the JSON object m, and says
// whether it was there.
func dropField(m map[string]any, path []string) bool {
	for _, key := range path[:len(path)-1] {
		next, ok := m[key].(map[string]any)
		if !ok {
			return false
		}
		m = next
	}
	last := path[len(path)-1]
	_, ok := m[last]
	delete(m, last)
	return ok
}

func indent(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = "  " + l
	}
	return out
}

// writeYAML writes obj as YAML with sorted keys under a comment header.
func writeYAML(path string, header []string, obj map[string]any) error {
	body, err := yaml.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	var b bytes.Buffer
	for _, l := range header {
		b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
	}
	b.Write(body)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
