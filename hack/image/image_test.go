package main

// The image as docker load, ctr import and skopeo read it: the tarball is
// opened as the files it holds, not through the code that wrote it.

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// repoRoot is the webhook's repository, seen from this package.
const repoRoot = "../.."

// testBuild is the build the tests make when IMAGE_ARCHIVE names none.
var testBuild = Build{
	Repository: "example.test/flyte-mpi-webhook",
	Version:    "v0.0.0-test",
	Revision:   "0000000000000000000000000000000000000000",
	Source:     "https://example.test/flyte-mpi-webhook",
	Created:    time.Unix(1700000000, 0).UTC(),
}

// buildArchive builds b into a tarball in a temporary directory.
func buildArchive(t *testing.T, b Build) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	b.RepoRoot = root
	index, err := b.Index(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteArchive(out, b.Ref(), index, b.Created); err != nil {
		t.Fatal(err)
	}
	return out
}

// archive is the tarball's files, by name.
type archive map[string][]byte

func readArchive(t *testing.T, path string) archive {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := archive{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return a
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			if a[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatalf("%s: %s: %v", path, h.Name, err)
			}
		}
	}
}

// blob is the blob of digest, which the archive must hold.
func (a archive) blob(t *testing.T, digest v1.Hash) []byte {
	t.Helper()
	b, ok := a["blobs/sha256/"+digest.Hex]
	if !ok {
		t.Fatalf("no blob %s in the archive", digest)
	}
	return b
}

// extract writes the archive's files under a temporary directory, for
// go-containerregistry's layout package to read as an OCI layout.
func (a archive) extract(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range a {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// theArchive is IMAGE_ARCHIVE (make image-check sets it to make image's
// tarball), or one the test builds.
func theArchive(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("IMAGE_ARCHIVE"); path != "" {
		return path
	}
	return buildArchive(t, testBuild)
}

func TestImage(t *testing.T) {
	a := readArchive(t, theArchive(t))

	var top v1.IndexManifest
	if err := json.Unmarshal(a["index.json"], &top); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json: %+v, want one image index", top.Manifests)
	}
	ref := top.Manifests[0].Annotations["io.containerd.image.name"]
	if ref == "" || ref != top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] {
		t.Errorf("index.json: annotations %v, want the image's name in io.containerd.image.name and org.opencontainers.image.ref.name",
			top.Manifests[0].Annotations)
	}

	// What go-containerregistry reads from the layout matches the files.
	index, err := layout.ImageIndexFromPath(a.extract(t))
	if err != nil {
		t.Fatalf("reading the archive as an OCI layout: %v", err)
	}
	images, err := index.ImageIndex(top.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := images.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []v1.Platform
	for _, desc := range manifest.Manifests {
		platforms = append(platforms, *desc.Platform)
		img, err := images.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(desc.Platform.String(), func(t *testing.T) { checkImage(t, img, *desc.Platform, ref) })
	}
	if diff := cmp.Diff(Platforms, platforms); diff != "" {
		t.Errorf("the index's platforms (-want +got):\n%s", diff)
	}

	checkDockerManifest(t, a, images, ref)
}

// checkImage checks one platform's image: its config, and its files.
func checkImage(t *testing.T, img v1.Image, platform v1.Platform, ref string) {
	config, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// The config's own os and architecture: containerd's import drops an
	// image whose config names no platform.
	if config.OS != platform.OS || config.Architecture != platform.Architecture {
		t.Errorf("config os/architecture %s/%s, want %s", config.OS, config.Architecture, platform)
	}
	if config.Config.User != "65532:65532" {
		t.Errorf("config user %q, want 65532:65532 (numeric, nonroot)", config.Config.User)
	}
	if diff := cmp.Diff([]string{"/webhook"}, config.Config.Entrypoint); diff != "" {
		t.Errorf("config entrypoint (-want +got):\n%s", diff)
	}
	if len(config.Config.Cmd) != 0 {
		t.Errorf("config cmd %q, want none", config.Config.Cmd)
	}
	labels := config.Config.Labels
	if got, want := labels["org.opencontainers.image.version"], ref[strings.LastIndex(ref, ":")+1:]; got != want {
		t.Errorf("label org.opencontainers.image.version %q, want the tag of %s", got, ref)
	}
	for _, key := range []string{"revision", "source", "created", "licenses"} {
		if labels["org.opencontainers.image."+key] == "" {
			t.Errorf("no label org.opencontainers.image.%s: %v", key, labels)
		}
	}
	if got := labels["org.opencontainers.image.created"]; got != config.Created.UTC().Format(time.RFC3339) {
		t.Errorf("label created %s, config created %s: want the same time", got, config.Created)
	}

	files := map[string]*tar.Header{}
	var webhook []byte
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, layer := range layers {
		rc, err := layer.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			name := "/" + strings.TrimSuffix(h.Name, "/")
			files[name] = h
			if !h.ModTime.Equal(config.Created.Time) {
				t.Errorf("%s: mtime %s, want the config's created time %s", name, h.ModTime, config.Created)
			}
			if name == "/webhook" {
				if webhook, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
		rc.Close()
	}
	for _, shell := range []string{"/bin/sh", "/bin/bash", "/bin/busybox", "/usr/bin/sh", "/bin"} {
		if _, ok := files[shell]; ok {
			t.Errorf("the image holds %s; want no shell", shell)
		}
	}
	if h := files["/webhook"]; h == nil || h.Mode&0o111 == 0 {
		t.Fatalf("/webhook: %+v, want an executable file", h)
	}
	if h := files["/tmp"]; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory anyone may write, sticky", h)
	}
	checkBinary(t, webhook, platform)
}

// checkBinary checks that the webhook is a static ELF binary for platform.
func checkBinary(t *testing.T, webhook []byte, platform v1.Platform) {
	f, err := elf.NewFile(bytes.NewReader(webhook))
	if err != nil {
		t.Fatalf("/webhook: not an ELF binary: %v", err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if want := machines[platform.Architecture]; f.Machine != want {
		t.Errorf("/webhook: machine %s, want %s for %s", f.Machine, want, platform)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/webhook: has a dynamic loader; want a static binary (CGO_ENABLED=0)")
		}
	}
}

// checkDockerManifest checks manifest.json, which docker load reads: the
// amd64 image, tagged ref, its blobs in the archive.
func checkDockerManifest(t *testing.T, a archive, images v1.ImageIndex, ref string) {
	var entries tarball.Manifest
	if err := json.Unmarshal(a["manifest.json"], &entries); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(entries) != 1 {
		t.Fatalf("manifest.json: %d entries, want one", len(entries))
	}
	if diff := cmp.Diff([]string{ref}, entries[0].RepoTags); diff != "" {
		t.Errorf("manifest.json RepoTags (-want +got):\n%s", diff)
	}
	manifest, err := images.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(manifest.Manifests, func(d v1.Descriptor) bool { return d.Platform.Equals(DockerLoadPlatform) })
	img, err := images.Image(manifest.Manifests[i].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	want := tarball.Descriptor{Config: blobPath(m.Config.Digest), RepoTags: []string{ref}}
	for _, l := range m.Layers {
		want.Layers = append(want.Layers, blobPath(l.Digest))
	}
	if diff := cmp.Diff(want, entries[0]); diff != "" {
		t.Errorf("manifest.json, against the %s image (-want +got):\n%s", DockerLoadPlatform, diff)
	}
	for _, path := range append([]string{entries[0].Config}, entries[0].Layers...) {
		if _, ok := a[path]; !ok {
			t.Errorf("manifest.json names %s, which the archive does not hold", path)
		}
	}
}

// buildOf is the Build that made the archive, read from its labels.
func buildOf(t *testing.T, a archive) Build {
	t.Helper()
	var top v1.IndexManifest
	if err := json.Unmarshal(a["index.json"], &top); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	var images v1.IndexManifest
	if err := json.Unmarshal(a.blob(t, top.Manifests[0].Digest), &images); err != nil {
		t.Fatal(err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(a.blob(t, images.Manifests[0].Digest), &m); err != nil {
		t.Fatal(err)
	}
	var config v1.ConfigFile
	if err := json.Unmarshal(a.blob(t, m.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	ref := top.Manifests[0].Annotations["io.containerd.image.name"]
	labels := config.Config.Labels
	return Build{
		Repository: strings.TrimSuffix(ref, ":"+labels["org.opencontainers.image.version"]),
		Version:    labels["org.opencontainers.image.version"],
		Revision:   labels["org.opencontainers.image.revision"],
		Source:     labels["org.opencontainers.image.source"],
		Created:    config.Created.UTC(),
	}
}

func TestImageIsReproducible(t *testing.T) {
	first := theArchive(t)
	b := buildOf(t, readArchive(t, first))
	second := buildArchive(t, b)
	want, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("a second build of %s (revision %s, created %s) differs from %s: index.json %s, then %s",
			b.Ref(), b.Revision, b.Created, first, readArchive(t, first)["index.json"], readArchive(t, second)["index.json"])
	}
}

func TestRunRefusesWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name, out, epoch, want string
		b                      Build
	}{
		{"no version", "x.tar", "1", "-version", Build{Repository: "r", Revision: "abc"}},
		{"no epoch", "x.tar", "", "-epoch", Build{Repository: "r", Version: "v1", Revision: "abc"}},
		{"epoch not a number", "x.tar", "yesterday", `"yesterday"`, Build{Repository: "r", Version: "v1", Revision: "abc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.b, tc.out, tc.epoch)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: error %v, want one naming %s", err, tc.want)
			}
		})
	}
}
