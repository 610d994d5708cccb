package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

func TestFromBuild(t *testing.T) {
	vcs := func(revision, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: revision}, {Key: "vcs.modified", Value: modified}}
	}
	cases := []struct {
		name              string
		version, revision string
		build             *debug.BuildInfo
		want              Info
	}{{
		name:    "set at build time: the build info does not override it",
		version: "v0.1.0", revision: "abc123",
		build: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v9.9.9"}, Settings: vcs("def456", "true")},
		want:  Info{Version: "v0.1.0", Revision: "abc123", GoVersion: "go1.26.8"},
	}, {
		// make build, make image and make image-check on a work tree with
		// changes: Go stamps a +dirty pseudo-version, but VERSION=dev asked
		// for dev, and the revision says dirty.
		name:    "VERSION=dev in a dirty checkout: dev, though Go stamped a version",
		version: Unknown, revision: "def456-dirty",
		build: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20260101000000-def456000000+dirty"},
			Settings: vcs("def456", "true")},
		want: Info{Version: Unknown, Revision: "def456-dirty", GoVersion: "go1.26.8"},
	}, {
		name:  "go build in a dirty checkout: the version and the commit Go stamped, dirty",
		build: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20260101000000-def456000000+dirty"}, Settings: vcs("def456", "true")},
		want:  Info{Version: "v0.1.1-0.20260101000000-def456000000+dirty", Revision: "def456-dirty", GoVersion: "go1.26.8"},
	}, {
		name:  "go build with -buildvcs=false: dev",
		build: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
		want:  Info{Version: Unknown, GoVersion: "go1.26.8"},
	}, {
		name:  "go install of a release: the module's version",
		build: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}, Settings: vcs("def456", "false")},
		want:  Info{Version: "v0.1.0", Revision: "def456", GoVersion: "go1.26.8"},
	}, {
		name: "no build info: dev",
		want: Info{Version: Unknown, GoVersion: runtime.Version()},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, fromBuild(tc.version, tc.revision, tc.build)); diff != "" {
				t.Errorf("fromBuild (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildInfoMetric(t *testing.T) {
	i := Get()
	want := `# HELP flyte_mpi_webhook_build_info 1, with the webhook's version, the commit it was built from and the Go version that built it as labels.
# TYPE flyte_mpi_webhook_build_info gauge
flyte_mpi_webhook_build_info{goversion="` + i.GoVersion + `",revision="` + i.Revision + `",version="` + i.Version + `"} 1
`
	if err := testutil.GatherAndCompare(metrics.Registry, strings.NewReader(want), "flyte_mpi_webhook_build_info"); err != nil {
		t.Error(err)
	}
}
