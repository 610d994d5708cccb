package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/flyteorg/flyte-mpi-webhook/internal/version"
)

// runVersion prints which build this is: as a line, or as JSON with -o json.
func runVersion(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	output := fs.String("o", "text", "output format: text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version takes no arguments, got %q", fs.Args())
	}
	info := version.Get()
	switch *output {
	case "text":
		revision := info.Revision
		if revision == "" {
			revision = "unknown"
		}
		_, err := fmt.Fprintf(stdout, "flyte-mpi-webhook %s (revision %s, %s)\n", info.Version, revision, info.GoVersion)
		return err
	case "json":
		return json.NewEncoder(stdout).Encode(info)
	default:
		return fmt.Errorf("-o %q: want text or json", *output)
	}
}
