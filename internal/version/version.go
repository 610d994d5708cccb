// Package version says which build of the webhook runs: the release it was
// built as, the commit, and the Go toolchain. `webhook version` prints it,
// the start-up log line carries it, and the metric
// flyte_mpi_webhook_build_info exposes it.
package version

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Version and Revision are set at build time with
// -ldflags "-X github.com/flyteorg/flyte-mpi-webhook/internal/version.Version=v1.2.3 -X ...Revision=SHA"
// (make build, make image, the Dockerfile). Left empty, Get reads what the
// Go toolchain recorded instead; a version set, even to Unknown, is
// reported as it is, so that the binary says what its build asked for.
var (
	Version  = ""
	Revision = ""
)

// Unknown is the version of a build that says none, and that the Go
// toolchain knows none for either, such as go run: the Makefile's default
// VERSION.
const Unknown = "dev"

// Info is what a build knows of itself.
type Info struct {
	// Version is the release, such as v0.1.0, or "dev", as the build set
	// it; else the module version Go stamped, such as go install's.
	Version string `json:"version"`
	// Revision is the commit it was built from, with "-dirty" when the
	// work tree had changes, or empty when unknown.
	Revision string `json:"revision"`
	// GoVersion is the Go toolchain that built it.
	GoVersion string `json:"goVersion"`
}

// Get returns this build's Info: Version and Revision when the build set
// them, else the module version and the VCS commit the Go toolchain stamps
// into a build (go install of a release, go build in a git checkout).
func Get() Info {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return fromBuild(Version, Revision, info)
}

// fromBuild fills what version and revision leave empty from build, and a
// version that neither knows with Unknown.
func fromBuild(version, revision string, build *debug.BuildInfo) Info {
	if build == nil {
		build = &debug.BuildInfo{}
	}
	i := Info{Version: version, Revision: revision, GoVersion: build.GoVersion}
	if i.GoVersion == "" {
		i.GoVersion = runtime.Version()
	}
	// "(devel)" is what a build of the main module says when Go knows no
	// version for it (go run, or -buildvcs=false).
	if i.Version == "" && build.Main.Version != "(devel)" {
		i.Version = build.Main.Version
	}
	if i.Version == "" {
		i.Version = Unknown
	}
	if i.Revision == "" {
		var modified bool
		for _, s := range build.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && i.Revision != "" {
			i.Revision += "-dirty"
		}
	}
	return i
}

// buildInfo is 1, with this build's Info as its labels, as Prometheus'
// own <name>_build_info metrics are: a dashboard joins on it to say which
// version each pod runs.
var buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "flyte_mpi_webhook_build_info",
	Help: "1, with the webhook's version, the commit it was built from and the Go version that built it as labels.",
}, []string{"version", "revision", "goversion"})

func init() {
	i := Get()
	buildInfo.WithLabelValues(i.Version, i.Revision, i.GoVersion).Set(1)
	metrics.Registry.MustRegister(buildInfo)
}
