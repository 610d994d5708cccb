// Command image builds the webhook's OCI image without a Docker daemon or a
// base image: the static binary of ./cmd/webhook for each platform, with the
// files a nonroot image needs, put together with go-containerregistry and
// written as one tarball that docker load, ctr images import and skopeo read.
//
//	go run . -out FILE -repository REPO -version VERSION -revision SHA -epoch SECONDS
//
// The same commit gives the same image digest: every time in the image is
// -epoch (the commit's time), and Go's -trimpath build is reproducible.
package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user and entrypoint; the Dockerfile says the same (a test
// holds them equal). Numeric, so that the kubelet can check runAsNonRoot.
const (
	User       = "65532:65532"
	Entrypoint = "/webhook"
)

// Platforms are the platforms the image is built for.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// VersionPackage is the package whose Version and Revision the build sets
// with -ldflags -X.
const VersionPackage = "github.com/flyteorg/flyte-mpi-webhook/internal/version"

// Build says what to build and how to label it.
type Build struct {
	// RepoRoot is the root of the webhook's repository.
	RepoRoot string
	// Repository and Version name the image: REPOSITORY:VERSION.
	Repository, Version string
	// Revision is the commit the image is built from.
	Revision string
	// Source is the repository's URL, for the org.opencontainers.image.source label.
	Source string
	// Created is the time every file and the image's config carry.
	Created time.Time
}

// Ref is the image's name and tag.
func (b Build) Ref() string { return b.Repository + ":" + b.Version }

// GoBuildEnv is the environment of the binary's build, beside GOOS and GOARCH.
var GoBuildEnv = []string{"CGO_ENABLED=0"}

// GoBuildArgs are the arguments of the binary's go build: a static binary
// without symbol tables or file paths, and the version it reports.
func GoBuildArgs(version, revision, out string) []string {
	return []string{"build", "-trimpath",
		"-ldflags=-s -w -X " + VersionPackage + ".Version=" + version + " -X " + VersionPackage + ".Revision=" + revision,
		"-o", out, "./cmd/webhook"}
}

// buildBinary builds the webhook for platform into dir, and returns its path.
func (b Build) buildBinary(platform v1.Platform, dir string) (string, error) {
	out := filepath.Join(dir, "webhook-"+platform.OS+"-"+platform.Architecture)
	cmd := exec.Command("go", GoBuildArgs(b.Version, b.Revision, out)...)
	cmd.Dir = b.RepoRoot
	cmd.Env = append(append(os.Environ(), GoBuildEnv...), "GOOS="+platform.OS, "GOARCH="+platform.Architecture)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building ./cmd/webhook for %s/%s: %w", platform.OS, platform.Architecture, err)
	}
	return out, nil
}

// Index builds the binary for each platform and returns the image index.
func (b Build) Index(workDir string) (v1.ImageIndex, error) {
	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, platform := range Platforms {
		binary, err := b.buildBinary(platform, workDir)
		if err != nil {
			return nil, err
		}
		img, err := b.image(platform, binary)
		if err != nil {
			return nil, fmt.Errorf("image for %s/%s: %w", platform.OS, platform.Architecture, err)
		}
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &platform},
		})
	}
	return index, nil
}

// labels are the image's OCI labels (annotations keys of the image-spec).
func (b Build) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "flyte-mpi-webhook",
		"org.opencontainers.image.description": "Mutating admission webhook that gives Flyte's MPI and Horovod workers their worker command",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     b.Version,
		"org.opencontainers.image.revision":    b.Revision,
		"org.opencontainers.image.source":      b.Source,
		"org.opencontainers.image.created":     b.Created.UTC().Format(time.RFC3339),
	}
}

// image is one platform's image: one layer, the binary and the nonroot files.
func (b Build) image(platform v1.Platform, binary string) (v1.Image, error) {
	layerTar, err := b.layerTar(binary)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	// The os and architecture in the config too: containerd's import keeps
	// only the images whose config names its platform.
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		OS:           platform.OS,
		Architecture: platform.Architecture,
		Created:      v1.Time{Time: b.Created},
		Config: v1.Config{
			User:       User,
			Entrypoint: []string{Entrypoint},
			WorkingDir: "/",
			Env:        []string{"PATH=/"},
			Labels:     b.labels(),
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: b.Created},
			CreatedBy: "hack/image: ./cmd/webhook, /etc/passwd, /etc/group, /tmp",
		},
	})
}

// The accounts of distroless's nonroot image, so that tools that map the
// uid to a name (ps, id, a debug container) find one.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// layerTar is the layer's tar: every entry owned by root and dated Created,
// in a fixed order, so that the same binary gives the same bytes.
func (b Build) layerTar(binary string) ([]byte, error) {
	webhook, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		header tar.Header
		body   []byte
	}{
		{tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, nil},
		{tar.Header{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644}, []byte(group)},
		{tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, []byte(passwd)},
		{tar.Header{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755}, nil},
		{tar.Header{Name: "home/nonroot/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: 65532, Gid: 65532}, nil},
		{tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}, nil},
		{tar.Header{Name: strings.TrimPrefix(Entrypoint, "/"), Typeflag: tar.TypeReg, Mode: 0o755}, webhook},
	}
	for _, e := range entries {
		e.header.Size = int64(len(e.body))
		e.header.ModTime = b.Created
		if err := tw.WriteHeader(&e.header); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
