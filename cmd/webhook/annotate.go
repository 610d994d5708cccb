package main

import (
	"fmt"
	"io"

	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/internal/annotate"
)

// runAnnotate prints the annotations that carry a task to the webhook.
func runAnnotate(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := subcommandFlags("annotate", "usage: webhook annotate -f FILE\n\n"+
		"FILE is the task custom as JSON, or a task serialized by pyflyte serialize (a binary\n"+
		"flyteidl TaskTemplate or TaskSpec); - reads standard input. Prints the annotations\n"+
		"to add to the task's pod template or launch plan, as YAML.", stderr)
	file := fs.String("f", "", "the task custom (JSON) or serialized task; - reads standard input")
	if err := fs.Parse(args); err != nil {
		return err
	}
	data, err := readInput(*file, stdin)
	if err != nil {
		return err
	}
	annotations, warning, err := annotate.FromFile(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	if warning != "" {
		fmt.Fprintln(stderr, "warning:", warning)
	}
	out, err := yaml.Marshal(annotations)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}
