package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DockerLoadPlatform is the platform whose image manifest.json names, for
// docker load with Docker's own image store, which reads one image per tag;
// with the containerd image store, Docker reads index.json and both.
var DockerLoadPlatform = Platforms[0]

// WriteArchive writes index as an OCI image layout in a tarball at out
// (index.json naming it ref), with a manifest.json beside it as docker save
// writes one, so that docker load reads it too. Every entry is dated
// created, in a fixed order: the same index gives the same bytes.
func WriteArchive(out, ref string, index v1.ImageIndex, created time.Time) error {
	dir, err := os.MkdirTemp("", "image-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout in %s: %w", dir, err)
	}
	// containerd names the image by the first; the image-spec's ref.name is the second.
	if err := path.AppendIndex(index, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref,
	})); err != nil {
		return fmt.Errorf("OCI layout in %s: %w", dir, err)
	}
	dockerManifest, err := dockerLoadManifest(ref, index)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), dockerManifest, 0o644); err != nil {
		return err
	}
	return tarDir(out, dir, created)
}

// dockerLoadManifest is docker save's manifest.json for DockerLoadPlatform's
// image, whose blobs the OCI layout holds.
func dockerLoadManifest(ref string, index v1.ImageIndex) ([]byte, error) {
	manifest, err := index.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, desc := range manifest.Manifests {
		if desc.Platform == nil || !desc.Platform.Equals(DockerLoadPlatform) {
			continue
		}
		img, err := index.Image(desc.Digest)
		if err != nil {
			return nil, err
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		entry := tarball.Descriptor{Config: blobPath(m.Config.Digest), RepoTags: []string{ref}}
		for _, layer := range m.Layers {
			entry.Layers = append(entry.Layers, blobPath(layer.Digest))
		}
		return json.Marshal(tarball.Manifest{entry})
	}
	return nil, fmt.Errorf("no image for %s/%s in the index", DockerLoadPlatform.OS, DockerLoadPlatform.Architecture)
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// tarDir writes the files under dir into a tarball at out, atomically:
// WalkDir's lexical order, every entry owned by root and dated created.
func tarDir(out, dir string, created time.Time) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		header := &tar.Header{Name: filepath.ToSlash(rel), ModTime: created, Mode: 0o644, Typeflag: tar.TypeReg}
		if d.IsDir() {
			header.Name, header.Mode, header.Typeflag = header.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(header)
		}
		body, err := os.Open(path)
		if err != nil {
			return err
		}
		defer body.Close()
		info, err := body.Stat()
		if err != nil {
			return err
		}
		header.Size = info.Size()
		if err := tw.WriteHeader(header); err != nil {
			return err
		}
		_, err = io.Copy(tw, body)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return os.Rename(tmp, out)
}
