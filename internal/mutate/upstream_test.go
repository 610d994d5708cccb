package mutate

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// upstreamKind is how Flyte with the upstream fix (hack/upstream) and Flyte
// as published with the webhook compare on one job, and why.
type upstreamKind string

// The kinds, each with its reason in docs/UPSTREAM.md (upstreamWhy).
const (
	// upstreamEqual: the task declares its worker command; the fix writes it
	// where the webhook moves it: the same job, but the source annotation.
	upstreamEqual upstreamKind = "equal"
	// upstreamAnnotation: only an annotation declares it, which Flyte does
	// not read: the webhook's alone, with the fix or without.
	upstreamAnnotation upstreamKind = "annotation"
	// upstreamNeither: the task declares none: both leave the job as Flyte made it.
	upstreamNeither upstreamKind = "neither"
	// upstreamEmptyFirstWord: the declared command's first word is empty:
	// both leave the job as Flyte made it; only the webhook warns.
	upstreamEmptyFirstWord upstreamKind = "empty first word"
)

// upstreamWhy is the reason each kind gives, for the table.
var upstreamWhy = map[upstreamKind]string{
	upstreamEqual: "equal, but the source annotation: the task declares its worker command, and the fix writes it " +
		"where the webhook moves it",
	upstreamAnnotation: "differs: only the annotation declares the command, and Flyte does not read it: the webhook's " +
		"alone, with the fix or without",
	upstreamNeither: "equal: the task declares no worker command, and both leave the job as Flyte made it " +
		"(its workers sleep; the launcher's `kubectl exec` starts the ranks)",
	upstreamEmptyFirstWord: "equal: the declared command's first word is empty (a `worker_spec_command` that starts with " +
		"a space), which no runtime could start, and both leave the job as Flyte made it; the webhook warns, " +
		"naming the field, and the fix says nothing",
}

// upstreamExpected is the kind of each job of fixtures.UpstreamJobs.
var upstreamExpected = map[string]upstreamKind{
	fixtures.HorovodWorkerCommand:                upstreamEqual,
	fixtures.HorovodFastRegisterWorkerCommand:    upstreamEqual,
	fixtures.HorovodBothCommands:                 upstreamEqual,
	fixtures.LegacyWorkerSpecCommand:             upstreamEqual,
	fixtures.HorovodPodTemplateAnnotation:        upstreamAnnotation,
	fixtures.HorovodTaskAnnotations:              upstreamAnnotation,
	fixtures.HorovodLaunchPlanAnnotations:        upstreamAnnotation,
	fixtures.HorovodNoWorkerCommand:              upstreamNeither,
	fixtures.HorovodLauncherCommand:              upstreamNeither,
	fixtures.MPIPlain:                            upstreamNeither,
	fixtures.LegacyWorkerSpecCommandLeadingSpace: upstreamEmptyFirstWord,
}

// upstreamRow is what the comparison measures on one job, a row of docs/UPSTREAM.md's table.
type upstreamRow struct {
	Job string
	// Today is what the API server stores of Flyte's job as published, through the webhook.
	Today string
	// Fix is the job Flyte with the fix builds, as the API server stores it without an add-on.
	Fix string
	// Both is what the webhook does with the job Flyte with the fix builds.
	Both string
	Kind upstreamKind
}

// upstreamDoc is the page whose table TestUpstreamEquality renders, between these markers.
const (
	upstreamDoc   = "docs/UPSTREAM.md"
	upstreamBegin = "<!-- BEGIN TestUpstreamEquality: make golden rewrites this table -->\n"
	upstreamEnd   = "<!-- END TestUpstreamEquality -->\n"
)

// TestUpstreamEquality compares, job by job, Flyte v1.16.8 with the upstream
// fix (testdata/flyte/upstream/patched, which make testdata builds with
// hack/upstream's patch) and Flyte v1.16.8 as published with the webhook
// (config/default's options): what the API server stores of each. Where the
// task declares its worker command, the two store the same job, but the
// source annotation; every other job's difference is one of upstreamKind's,
// with its reason. With the fix and the webhook both, the webhook stores
// what it stores today, but the source annotation: users may upgrade Flyte
// and remove the add-on in either order. Both MPIJob versions give the same
// rows; docs/UPSTREAM.md's table is v1's (`make golden` rewrites it).
// test/envtest holds the same through an API server, and the policy too.
func TestUpstreamEquality(t *testing.T) {
	if got := len(fixtures.UpstreamJobs); got != len(upstreamExpected) {
		t.Fatalf("%d jobs in fixtures.UpstreamJobs, %d in upstreamExpected", got, len(upstreamExpected))
	}
	opts := DefaultOptions()
	jobs := NewJobDecoder(opts.FlyteTaskSelector)
	rows := map[string][]upstreamRow{}
	for _, version := range []string{"v1", "v2beta1"} {
		for _, name := range fixtures.UpstreamJobs {
			t.Run(version+"/"+name, func(t *testing.T) {
				published, err := fixtures.PublishedFlyteJob(version, name)
				if err != nil {
					t.Fatal(err)
				}
				patched, err := fixtures.PatchedFlyteJob(version, name)
				if err != nil {
					t.Fatal(err)
				}
				sentPublished, sentPatched := fixtures.MustJSON(published), fixtures.MustJSON(patched)
				today, dToday := storedThrough(t, jobs, opts, sentPublished)
				both, dBoth := storedThrough(t, jobs, opts, sentPatched)
				fix := object(t, sentPatched)
				unpatched := object(t, sentPublished)

				// With the fix and the webhook, the webhook stores what it stores today.
				if diff := cmp.Diff(withoutSource(today), withoutSource(both)); diff != "" {
					t.Errorf("with the fix, the webhook stores another job than today, apart from the source annotation (-today +with the fix):\n%s", diff)
				}
				if diff := cmp.Diff(dToday.Warnings, dBoth.Warnings); diff != "" {
					t.Errorf("with the fix, the webhook warns otherwise (-today +with the fix):\n%s", diff)
				}

				row := upstreamRow{Job: name, Today: describeDecision(dToday), Both: describeDecision(dBoth), Fix: "as published"}
				if !cmp.Equal(fix, unpatched) {
					row.Fix = "the worker's `command`, no `args`"
					if command, args := workerOf(t, fix); !cmp.Equal(command, fixtures.SSHD) || args != nil {
						t.Errorf("the fix's worker runs command %q, args %q; want %q and no args", command, args, fixtures.SSHD)
					}
				}
				sameAsToday := cmp.Equal(withoutSource(today), fix)
				switch {
				case sameAsToday && row.Fix != "as published" && dToday.Source == SourceFlyteWorkerArgs && dBoth.Outcome == OutcomeUnchanged:
					row.Kind = upstreamEqual
				case !sameAsToday && row.Fix == "as published" && dToday.Source == SourceTaskCustom:
					row.Kind = upstreamAnnotation
				case sameAsToday && row.Fix == "as published" && dToday.Outcome == OutcomeUnchanged && len(dToday.Warnings) == 0:
					row.Kind = upstreamNeither
				case sameAsToday && row.Fix == "as published" && dToday.Outcome == OutcomeUnchanged && len(dToday.Warnings) == 1 &&
					strings.Contains(dToday.Warnings[0], ".args[0]: is empty"):
					row.Kind = upstreamEmptyFirstWord
				default:
					t.Errorf("a difference no kind explains: today %s, with the fix %s, both %s; stored today against the fix (-today +fix):\n%s",
						row.Today, row.Fix, row.Both, cmp.Diff(withoutSource(today), fix))
				}
				if want := upstreamExpected[name]; row.Kind != want {
					t.Errorf("the fix and the webhook compare as %q, want %q", row.Kind, want)
				}
				rows[version] = append(rows[version], row)
			})
		}
	}
	if diff := cmp.Diff(rows["v1"], rows["v2beta1"]); diff != "" {
		t.Errorf("v1 and v2beta1 compare otherwise (-v1 +v2beta1):\n%s", diff)
	}
	checkUpstreamDoc(t, renderUpstreamTable(rows["v1"]))
}

// storedThrough decides on the MPIJob sent with opts, and returns it as the
// API server stores it after the patch, and the decision.
func storedThrough(t *testing.T, jobs *JobDecoder, opts Options, sent []byte) (map[string]any, Decision) {
	t.Helper()
	decoded, err := jobs.Decode(sent)
	if err != nil {
		t.Fatal(err)
	}
	d := Decide(decoded, opts)
	if d.Err != nil {
		t.Fatalf("Decide: %v", d.Err)
	}
	return object(t, applied(t, sent, d)), d
}

func object(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// withoutSource returns a copy of job without the annotation AnnotationWorkerCommandSource.
func withoutSource(job map[string]any) map[string]any {
	var out map[string]any
	b, _ := json.Marshal(job) // a map decoded from JSON
	_ = json.Unmarshal(b, &out)
	if metadata, ok := out["metadata"].(map[string]any); ok {
		if annotations, ok := metadata["annotations"].(map[string]any); ok {
			delete(annotations, AnnotationWorkerCommandSource)
		}
	}
	return out
}

// workerOf returns the command and args of job's first Worker container.
func workerOf(t *testing.T, job map[string]any) (command, args []string) {
	t.Helper()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	// storedWorker (releases_test.go) reads them from JSON.
	return storedWorker(t, b, Decision{})
}

// describeDecision says, for the table, what the webhook stores.
func describeDecision(d Decision) string {
	var s string
	switch d.Outcome {
	case OutcomeMutated:
		s = fmt.Sprintf("the worker's `command`, no `args`; source `%s`", d.Source)
	case OutcomeUnchanged:
		s = "as Flyte made it"
	default:
		s = string(d.Outcome)
	}
	for _, w := range d.Warnings {
		field, _, _ := strings.Cut(w, ":")
		s += fmt.Sprintf(", a warning on `%s`", field[strings.LastIndex(field, ".")+1:])
	}
	return s
}

// renderUpstreamTable is docs/UPSTREAM.md's table of rows, with its markers.
func renderUpstreamTable(rows []upstreamRow) string {
	var b strings.Builder
	b.WriteString(upstreamBegin)
	b.WriteString("| job (`testdata/flyte`) | Flyte as published, with the webhook | Flyte with the fix, alone | " +
		"Flyte with the fix, with the webhook | the fix alone against the webhook today |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.Job, r.Today, r.Fix, r.Both, upstreamWhy[r.Kind])
	}
	b.WriteString(upstreamEnd)
	return b.String()
}

// checkUpstreamDoc compares table with docs/UPSTREAM.md's, or, with
// UPDATE_GOLDEN set (make golden), writes it there.
func checkUpstreamDoc(t *testing.T, table string) {
	t.Helper()
	path, err := fixtures.Path(upstreamDoc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	begin, end := strings.Index(doc, upstreamBegin), strings.Index(doc, upstreamEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no table between %q and %q", upstreamDoc, upstreamBegin, upstreamEnd)
	}
	documented := doc[begin : end+len(upstreamEnd)]
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(doc[:begin]+table+doc[end+len(upstreamEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(documented, table); diff != "" {
		t.Errorf("%s's table is not what the comparison measures (-documented +measured); if intended, run `make golden`:\n%s",
			upstreamDoc, diff)
	}
}
