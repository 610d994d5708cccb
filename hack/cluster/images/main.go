// Command cluster-image writes an image, as a tarball that
// `ctr images import` reads, without a Docker engine or a registry: from
// layers given as tar files and from single files, with the platform,
// entrypoint and user set in its config. crane's `append --oci-empty-base`
// leaves the platform empty, and ctr import then filters the image out.
//
//	cluster-image -name REF -out FILE [-layer TAR]... [-file SRC:DEST]... [-entrypoint PATH[,ARG]...] [-user UID] [-workdir DIR]
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// repeated is a repeatable string flag.
type repeated []string

func (r *repeated) String() string { return strings.Join(*r, " ") }

func (r *repeated) Set(s string) error {
	*r = append(*r, s)
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster-image:", err)
		os.Exit(1)
	}
}

func run() error {
	var layers, files repeated
	ref := flag.String("name", "", "the image's reference, e.g. example.com/pause:3.10")
	out := flag.String("out", "", "the tarball to write")
	entrypoint := flag.String("entrypoint", "", "the entrypoint, comma-separated")
	user := flag.String("user", "", "the user the image runs as")
	workdir := flag.String("workdir", "", "the working directory")
	flag.Var(&layers, "layer", "a tar file to add as a layer; repeatable")
	flag.Var(&files, "file", "SRC:DEST, a file to add, executable, in a layer of its own; repeatable")
	flag.Parse()
	if *ref == "" || *out == "" || len(layers)+len(files) == 0 {
		return fmt.Errorf("-name, -out and at least one -layer or -file are needed")
	}
	tag, err := name.NewTag(*ref)
	if err != nil {
		return fmt.Errorf("-name %q: %w", *ref, err)
	}
	img := empty.Image
	for _, file := range layers {
		layer, err := tarball.LayerFromFile(file)
		if err != nil {
			return fmt.Errorf("layer %s: %w", file, err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return fmt.Errorf("appending %s: %w", file, err)
		}
	}
	for _, spec := range files {
		layer, err := fileLayer(spec)
		if err != nil {
			return err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return fmt.Errorf("appending %s: %w", spec, err)
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("reading the config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.User, cfg.Config.WorkingDir = *user, *workdir
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if *entrypoint != "" {
		cfg.Config.Entrypoint = strings.Split(*entrypoint, ",")
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return fmt.Errorf("setting the config: %w", err)
	}
	if err := tarball.WriteToFile(*out+".tmp", tag, img); err != nil {
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	return os.Rename(*out+".tmp", *out)
}

// fileLayer returns a layer that holds the file SRC at DEST (spec SRC:DEST),
// mode 0755, with its parent directories.
func fileLayer(spec string) (v1.Layer, error) {
	src, dest, ok := strings.Cut(spec, ":")
	if !ok || !path.IsAbs(dest) {
		return nil, fmt.Errorf("-file %q is not SRC:/DEST", spec)
	}
	content, err := os.ReadFile(src)
	if err != nil {
		return nil, fmt.Errorf("-file %q: %w", spec, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := strings.Split(strings.Trim(path.Dir(dest), "/"), "/")
	for i := range dirs {
		if dirs[i] == "" {
			continue
		}
		dir := strings.Join(dirs[:i+1], "/") + "/"
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dest, "/"), Mode: 0o755, Size: int64(len(content)), ModTime: epoch}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
