package cluster_test

import (
	"archive/tar"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// How the README's install commands are run: as its reader would, from the
// directory holding make release's artifacts, with kubectl, helm and skopeo
// on PATH, and a machine that trusts the registry's CA (for skopeo,
// $HOME/.config/containers/certs.d; for helm and cosign, SSL_CERT_FILE).

// readmeVersion is the release the README's commands name; the suite puts
// its own release, RELEASE_VERSION, in its place.
const readmeVersion = "v0.1.0"

// installSnippets are the README's install commands, read from README.md.
type installSnippets struct {
	// helm pushes the image and the chart to a registry, and installs the chart from there ("### Helm").
	helm string
	// oneFile applies a release's one file with its image pointed at the registry ("### One file").
	oneFile string
	// overlay is the kustomization of an overlay of config/ ("### kustomize").
	overlay string
}

// readInstallSnippets reads, from the README at path, the first code block
// under each install heading.
func readInstallSnippets(path string) installSnippets {
	GinkgoHelper()
	readme, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	return installSnippets{
		helm:    codeBlock(string(readme), "### Helm", "sh"),
		oneFile: codeBlock(string(readme), "### One file", "sh"),
		overlay: codeBlock(string(readme), "### kustomize", "yaml"),
	}
}

// codeBlock returns the first fenced block of language lang after heading
// in markdown, with no other heading between them; it fails the spec when
// there is none.
func codeBlock(markdown, heading, lang string) string {
	GinkgoHelper()
	_, section, found := strings.Cut(markdown, "\n"+heading+"\n")
	Expect(found).To(BeTrue(), "README.md has no heading %q", heading)
	before, block, found := strings.Cut(section, "```"+lang+"\n")
	Expect(found && !regexp.MustCompile(`(?m)^#{1,6} `).MatchString(before)).To(BeTrue(),
		"README.md has no ```%s block under %q", lang, heading)
	block, _, found = strings.Cut(block, "```")
	Expect(found).To(BeTrue(), "README.md's ```%s block under %q does not end", lang, heading)
	return block
}

// forRelease is snippet with the README's placeholders filled as the
// suite's reader fills them: the registry, and the suite's release.
func forRelease(snippet string) string {
	return strings.NewReplacer("<registry>", registry, readmeVersion, releaseVersion,
		readmeVersion[1:], chartVersion()).Replace(snippet)
}

// chartVersion is the version of the release's chart: its version without the v.
func chartVersion() string { return strings.TrimPrefix(releaseVersion, "v") }

// chartRef is where the README's helm push puts the chart, and helm install takes it from.
func chartRef() string { return "oci://" + registry + "/charts/flyte-mpi-webhook" }

// imageRepository is where the README's skopeo copy puts the image.
func imageRepository() string { return registry + "/flyte-mpi-webhook" }

// readerEnv is the README reader's machine: HOME, with skopeo's trust in
// the registry's CA, and PATH, with kubectl, helm and cosign (whose keys
// have no password, and whose cache of sigstore's trust root is HOME's). It
// is removed when the suite ends.
func readerEnv() []string {
	GinkgoHelper()
	home, err := os.MkdirTemp("", "cluster-reader-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, home)
	ca, err := os.ReadFile(registryCA)
	Expect(err).NotTo(HaveOccurred())
	certs := filepath.Join(home, ".config", "containers", "certs.d", registry)
	bin := filepath.Join(home, "bin")
	Expect(os.MkdirAll(certs, 0o700)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(certs, "ca.crt"), ca, 0o600)).To(Succeed())
	Expect(os.MkdirAll(bin, 0o700)).To(Succeed())
	Expect(os.Symlink(env("KUBECTL"), filepath.Join(bin, "kubectl"))).To(Succeed())
	Expect(os.Symlink(helmBinary, filepath.Join(bin, "helm"))).To(Succeed())
	Expect(os.Symlink(cosignBinary, filepath.Join(bin, "cosign"))).To(Succeed())
	return append(os.Environ(), "HOME="+home, "PATH="+bin+":"+os.Getenv("PATH"), "SSL_CERT_FILE="+registryCA,
		"KUBECONFIG="+kubeconfig, "COSIGN_PASSWORD=", "TUF_ROOT="+filepath.Join(home, ".sigstore", "root"))
}

// releaseFiles returns a directory holding, as links, the files of the
// release named, as its reader downloads them; it is removed when the spec ends.
func releaseFiles(names ...string) string {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	for _, name := range names {
		Expect(os.Symlink(filepath.Join(releaseDir, name), filepath.Join(dir, name))).To(Succeed())
	}
	return dir
}

// sh runs script with bash, as the README's reader runs it, in dir; it
// fails the spec, with the output, when a command fails.
func sh(ctx context.Context, dir, script string) {
	GinkgoHelper()
	fmt.Fprintf(GinkgoWriter, "$ cd %s\n%s\n", dir, script)
	asReader(ctx, dir, "bash", "-euo", "pipefail", "-c", script)
}

// helm runs the Helm CLI with args, as the README's reader does.
func helm(ctx context.Context, args ...string) {
	GinkgoHelper()
	asReader(ctx, "", helmBinary, args...)
}

// asReader runs name with args in dir (the suite's own when empty), in the
// README reader's environment, within 5 minutes, and writes its output to
// the spec's; it fails the spec, with the output, when the command fails.
func asReader(ctx context.Context, dir, name string, args ...string) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, reader
	out, err := cmd.CombinedOutput()
	fmt.Fprintf(GinkgoWriter, "%s\n", out)
	Expect(err).NotTo(HaveOccurred(), "%s %v:\n%s", filepath.Base(name), args, out)
}

// imageTar is the release's image tarball, as make image wrote it.
func imageTar() string { return "flyte-mpi-webhook-" + releaseVersion + "-image.tar" }

// releasedDigest is the digest make image wrote beside the release's
// tarball (REPOSITORY:VERSION@sha256:...): its image index's.
func releasedDigest() string {
	GinkgoHelper()
	ref, err := os.ReadFile(filepath.Join(releaseDir, strings.TrimSuffix(imageTar(), ".tar")+".ref"))
	Expect(err).NotTo(HaveOccurred())
	_, digest, found := strings.Cut(strings.TrimSpace(string(ref)), "@")
	Expect(found).To(BeTrue(), "%s: no digest", ref)
	return digest
}

// platformManifest is one platform's image in an image index.
type platformManifest struct {
	Digest   string `json:"digest"`
	Platform struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

// imageIndex is the part of an OCI image index the suite reads.
type imageIndex struct {
	Manifests []platformManifest `json:"manifests"`
}

// tarIndex returns the image index of digest in the release's tarball, an OCI layout.
func tarIndex(digest string) imageIndex {
	GinkgoHelper()
	f, err := os.Open(filepath.Join(releaseDir, imageTar()))
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	blob := "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		Expect(err).NotTo(HaveOccurred(), "%s: no %s", imageTar(), blob)
		if strings.TrimPrefix(h.Name, "./") == blob {
			var index imageIndex
			Expect(json.NewDecoder(tr).Decode(&index)).To(Succeed())
			return index
		}
	}
}

// registryManifest fetches the manifest reference (a tag or a digest) of
// the webhook's repository from the registry, as the node's containerd
// does, and returns it with the digest the registry gives it.
func registryManifest(ctx context.Context, reference string) ([]byte, string) {
	GinkgoHelper()
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(registryCA)
	Expect(err).NotTo(HaveOccurred())
	Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
	httpClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"https://"+registry+"/v2/flyte-mpi-webhook/manifests/"+reference, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json")
	resp, err := httpClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.StatusCode).To(Equal(http.StatusOK), "%s: %s", req.URL, body)
	return body, resp.Header.Get("Docker-Content-Digest")
}

// expectRegistryHoldsRelease checks that the registry serves, under the
// release's tag, the image index make image wrote, with its digest, and
// each platform's image with the digest the tarball gives it.
func expectRegistryHoldsRelease(ctx context.Context) {
	GinkgoHelper()
	digest := releasedDigest()
	body, served := registryManifest(ctx, releaseVersion)
	Expect(served).To(Equal(digest), "the digest of %s:%s", imageRepository(), releaseVersion)
	var index imageIndex
	Expect(json.Unmarshal(body, &index)).To(Succeed())
	want := tarIndex(digest)
	Expect(index).To(Equal(want), "the registry's index (the tarball's: %+v)", want)
	var platforms []string
	for _, m := range index.Manifests {
		_, served := registryManifest(ctx, m.Digest)
		Expect(served).To(Equal(m.Digest))
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	Expect(platforms).To(ConsistOf("linux/amd64", "linux/arm64"))
}

// expectPodsRunReleasedImage checks that each webhook Pod runs the
// release's image, pulled by its digest from the registry.
func expectPodsRunReleasedImage(ctx context.Context) {
	GinkgoHelper()
	digest := releasedDigest()
	Eventually(ctx, func(g Gomega) {
		pods := webhookPods(ctx, g)
		g.Expect(pods).To(HaveLen(replicas))
		for _, pod := range pods {
			g.Expect(pod.Spec.Containers[0].Image).To(HaveSuffix("@"+digest), pod.Name)
			g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1), pod.Name)
			g.Expect(pod.Status.ContainerStatuses[0].ImageID).To(Equal(imageRepository()+"@"+digest), pod.Name)
		}
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// awaitPolicyLoaded waits until the API server applies the admission
// policy just installed to MPIJobs of version, the one served: until it
// does, Flyte's job would be stored unchanged.
func awaitPolicyLoaded(ctx context.Context, version string) {
	GinkgoHelper()
	ns := namespace(ctx)
	Eventually(ctx, func(g Gomega) {
		job := suspendedFlyteJob(version, ns, fmt.Sprintf("probe-%d", time.Now().UnixNano()))
		g.Expect(k8sClient.Create(ctx, job)).To(Succeed())
		command, _, _ := unstructured.NestedStringSlice(workerContainer(job), "command")
		g.Expect(command).To(Equal(fixtures.SSHD))
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
}

// awaitNamespaceGone waits until namespace name is deleted, and all it held.
func awaitNamespaceGone(ctx context.Context, name string) {
	GinkgoHelper()
	Eventually(ctx, func() error {
		err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
		if err == nil {
			return errors.New("namespace " + name + " is still there")
		}
		return client.IgnoreNotFound(err)
	}).WithTimeout(2 * time.Minute).WithPolling(poll).Should(Succeed())
}

// overlayNamespace is the namespace of the README's kustomize overlay.
const overlayNamespace = "ml-platform"

// writeOverlay writes the README's overlay, of config/policy-only, in a
// directory beside a checkout named flyte-mpi-webhook, as the README lays
// them out, and returns the overlay's directory.
func writeOverlay(snippet string) string {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	Expect(os.Symlink(sourceDir, filepath.Join(dir, "flyte-mpi-webhook"))).To(Succeed())
	overlay := filepath.Join(dir, "my-overlay")
	Expect(os.Mkdir(overlay, 0o700)).To(Succeed())
	Expect(snippet).To(ContainSubstring("config/default "), "the README's overlay names config/default")
	kustomization := strings.Replace(forRelease(snippet), "config/default ", "config/policy-only ", 1)
	Expect(kustomization).To(ContainSubstring("namespace: " + overlayNamespace))
	Expect(os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600)).To(Succeed())
	fmt.Fprintf(GinkgoWriter, "%s/kustomization.yaml:\n%s\n", overlay, kustomization)
	return overlay
}

// switchOperator runs training-operator v1.9.4, with its CRD, in place of v1.8.1, with test/cluster/cluster.sh.
func switchOperator(ctx context.Context) {
	GinkgoHelper()
	run(ctx, 3*time.Minute, env("CLUSTER_SCRIPT"), "switch-operator")
}
