package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// How the suite verifies the release before it installs it, as the
// README's "Verify what you install" tells a private mirror's keeper ("With
// a key"): make publish pushes it to the cluster's registry and signs it
// with a key pair the suite generates, and the README's commands, read from
// README.md, check it there with the public key, cosign.pub. The registry
// speaks TLS with the cluster's CA, which the reader's machine trusts
// (SSL_CERT_FILE for cosign and helm, certs.d for skopeo): nothing is
// checked with TLS off. test/release/check.sh runs the same block against a
// plain-HTTP registry on loopback (make release-check).

// withKeyHeading is the README's heading of the key form of its verification.
const withKeyHeading = "### With a key: a private mirror"

// The key pairs the suite generates, in the directory signingKeys: the
// release's, with which make publish signs it, and another.
const (
	releaseKey = "release"
	otherKey   = "other"
)

// signingKeys is the directory of the key pairs, in the reader's HOME (so
// removed when the suite ends); generateKeys sets it.
var signingKeys string

// readerHome is the HOME of the README reader's machine (readerEnv): the
// last HOME of its environment, which is the one a command gets.
func readerHome() string {
	GinkgoHelper()
	for _, kv := range slices.Backward(reader) {
		if home, found := strings.CutPrefix(kv, "HOME="); found {
			return home
		}
	}
	Fail("the reader's environment has no HOME")
	return ""
}

// generateKeys has cosign generate the release's key pair and another,
// without a password (COSIGN_PASSWORD is empty in the reader's environment).
func generateKeys(ctx context.Context) {
	GinkgoHelper()
	signingKeys = filepath.Join(readerHome(), "keys")
	Expect(os.MkdirAll(signingKeys, 0o700)).To(Succeed())
	for _, name := range []string{releaseKey, otherKey} {
		asReader(ctx, signingKeys, cosignBinary, "generate-key-pair", "--output-key-prefix", name)
	}
}

// publish runs make publish, as the README's "With a key" tells a mirror's
// keeper, in the checkout, on make release's files: it pushes the image
// (skopeo) and the chart (helm push) to the registry, signs both and
// attests the SBOMs with the release's key, and signs SHA256SUMS into
// SHA256SUMS.sigstore.json beside it. COSIGN and HELM are the reader's, on
// PATH, so that make builds neither.
func publish(ctx context.Context) {
	GinkgoHelper()
	asReader(ctx, sourceDir, "make", "--no-print-directory", "publish", "VERSION="+releaseVersion,
		"DIST_DIR="+releaseDir, "REGISTRY="+registry, "COSIGN_KEY="+filepath.Join(signingKeys, releaseKey+".key"),
		"COSIGN=cosign", "HELM=helm")
}

// verifyCommands returns the commands of the README's "With a key" block,
// one a line (a trailing backslash joins lines), for the suite's registry
// and release.
func verifyCommands() []string {
	GinkgoHelper()
	readmeText, err := os.ReadFile(filepath.Join(sourceDir, "README.md"))
	Expect(err).NotTo(HaveOccurred())
	block := strings.ReplaceAll(forRelease(codeBlock(string(readmeText), withKeyHeading, "sh")), "\\\n", " ")
	var commands []string
	for line := range strings.Lines(block) {
		if line = strings.TrimSpace(line); line != "" {
			commands = append(commands, line)
		}
	}
	Expect(commands).To(ContainElement(ContainSubstring("cosign verify-attestation ")),
		"the README's %q block", withKeyHeading)
	return commands
}

// verifierDir returns a directory as the README's reader holds it to run
// the verification: the release's files, with the signature of SHA256SUMS
// that make publish wrote, and cosign.pub, the public key of the pair key.
// It is removed when the spec ends.
func verifierDir(key string) string {
	GinkgoHelper()
	dir := releaseFiles(imageTar(), chartFile(), "SHA256SUMS", "SHA256SUMS.sigstore.json")
	Expect(os.Symlink(filepath.Join(signingKeys, key+".pub"), filepath.Join(dir, "cosign.pub"))).To(Succeed())
	return dir
}

// refusal is what cosign v3.1.3 prints when no signature or attestation of
// an artifact verifies with cosign.pub ("no matching attestations: failed to
// verify signature: ..."), or SHA256SUMS's bundle does not ("failed to verify
// signature: could not verify message: invalid signature ..."): the
// verification refused it, not the registry or the network.
var refusal = regexp.MustCompile(`no matching (signatures|attestations)|failed to verify signature`)

// expectVerification runs each command of the README's block in dir, with
// bash, as its reader runs it: every command holding refused (none, when
// it is empty) must fail with cosign's refusal, every other pass.
func expectVerification(ctx context.Context, when, dir string, commands []string, refused string) {
	GinkgoHelper()
	for _, command := range commands {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", command)
		cmd.Dir, cmd.Env = dir, reader
		out, err := cmd.CombinedOutput()
		cancel()
		fmt.Fprintf(GinkgoWriter, "%s: $ %s\n%s\n", when, command, out)
		if refused != "" && strings.Contains(command, refused) {
			Expect(err).To(HaveOccurred(), "%s: passed, and must be refused: %s\n%s", when, command, out)
			Expect(string(out)).To(MatchRegexp(refusal.String()), "%s: failed, but not as a refusal: %s", when, command)
			continue
		}
		Expect(err).NotTo(HaveOccurred(), "%s: %s\n%s", when, command, out)
	}
}

// pushTampered pushes, under the release's tag, another image of the same
// release: its linux/arm64 image alone, whose digest is not the index's
// that make publish signed; then signs and attests it with the other key,
// as whoever pushed it would. It returns the digest the tag then names.
func pushTampered(ctx context.Context) string {
	GinkgoHelper()
	tag := imageRepository() + ":" + releaseVersion
	asReader(ctx, releaseDir, "skopeo", "copy", "--quiet", "--override-os", "linux", "--override-arch", "arm64",
		"oci-archive:"+imageTar(), "docker://"+tag)
	_, tampered := registryManifest(ctx, releaseVersion)
	Expect(tampered).NotTo(BeEmpty())
	Expect(tampered).NotTo(Equal(releasedDigest()), "the tag still names the release's digest")
	image := imageRepository() + "@" + tampered
	key := filepath.Join(signingKeys, otherKey+".key")
	asReader(ctx, "", cosignBinary, "sign", "--yes", "--key", key, "--use-signing-config=false", "--tlog-upload=false", image)
	asReader(ctx, "", cosignBinary, "attest", "--yes", "--key", key, "--use-signing-config=false", "--tlog-upload=false",
		"--type", "spdxjson", "--predicate", filepath.Join(releaseDir, "flyte-mpi-webhook-"+releaseVersion+"-linux-arm64.spdx.json"),
		image)
	// The other key's signature of it is sound: only the key tells it from the release's.
	asReader(ctx, "", cosignBinary, "verify", "--key", filepath.Join(signingKeys, otherKey+".pub"),
		"--insecure-ignore-tlog=true", tag)
	return tampered
}

// restoreTag puts the release's tag back on its index, as the README's
// skopeo copy pushes it, and checks that the registry serves it so.
func restoreTag(ctx context.Context) {
	GinkgoHelper()
	asReader(ctx, releaseDir, "skopeo", "copy", "--quiet", "--all", "--preserve-digests",
		"oci-archive:"+imageTar(), "docker://"+imageRepository()+":"+releaseVersion)
	_, served := registryManifest(ctx, releaseVersion)
	Expect(served).To(Equal(releasedDigest()))
}
