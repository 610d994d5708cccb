package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	var b Build
	var out, epoch string
	flag.StringVar(&out, "out", "", "the image tarball to write")
	flag.StringVar(&b.RepoRoot, "repo-root", "../..", "the root of the webhook's repository")
	flag.StringVar(&b.Repository, "repository", "", "the image's repository, such as ghcr.io/flyteorg/flyte-mpi-webhook")
	flag.StringVar(&b.Version, "version", "", "the image's tag, and the version the binary reports")
	flag.StringVar(&b.Revision, "revision", "", "the commit the image is built from")
	flag.StringVar(&b.Source, "source", "https://github.com/flyteorg/flyte-mpi-webhook", "the repository's URL, for the image's labels")
	flag.StringVar(&epoch, "epoch", "", "every time in the image, in seconds since 1970 (SOURCE_DATE_EPOCH: the commit's time)")
	flag.Parse()
	if err := run(b, out, epoch); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(b Build, out, epoch string) error {
	for _, required := range []struct{ flag, value string }{
		{"-out", out}, {"-repository", b.Repository}, {"-version", b.Version}, {"-revision", b.Revision}, {"-epoch", epoch},
	} {
		if required.value == "" {
			return fmt.Errorf("%s is empty; it is required", required.flag)
		}
	}
	seconds, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("-epoch %q: want seconds since 1970: %w", epoch, err)
	}
	b.Created = time.Unix(seconds, 0).UTC()
	if b.RepoRoot, err = filepath.Abs(b.RepoRoot); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "image-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	index, err := b.Index(work)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := WriteArchive(out, b.Ref(), index, b.Created); err != nil {
		return err
	}
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "image: wrote", out)
	fmt.Printf("%s@%s\n", b.Ref(), digest)
	return nil
}
