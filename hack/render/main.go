// Command render prints a kustomization rendered as `kustomize build` would,
// with the webhook's image set: `make build-installer` and `make deploy` use
// it, so that neither needs a kustomize binary.
//
//	go run ./hack/render [-image IMG] [-o FILE] [DIR]   (DIR defaults to config/default)
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/flyteorg/flyte-mpi-webhook/internal/manifests"
)

func main() {
	image := flag.String("image", "", "image of the webhook, as in `kustomize edit set image controller=IMAGE`; empty keeps config/manager's")
	output := flag.String("o", "", "file to write, only once rendering succeeded; empty prints to standard output")
	flag.Parse()
	dir := "config/default"
	if flag.NArg() > 1 {
		fmt.Fprintln(os.Stderr, "render: at most one kustomization directory")
		os.Exit(2)
	}
	if flag.NArg() == 1 {
		dir = flag.Arg(0)
	}
	if err := render(dir, *image, *output); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func render(dir, image, output string) error {
	m, err := manifests.Render(dir, image)
	if err != nil {
		return err
	}
	if output == "" {
		_, err := os.Stdout.Write(m.YAML)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(output), 0o755); err != nil {
		return err
	}
	// Write beside output and rename, so that a failed write leaves the old file whole.
	tmp, err := os.CreateTemp(filepath.Dir(output), filepath.Base(output)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(m.YAML); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), output)
}
