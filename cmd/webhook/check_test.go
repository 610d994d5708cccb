package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

func TestLabelsFor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		selectors []string
		want      map[string]string
		wantErr   string
	}{
		{"the default Flyte task selector", []string{mutate.DefaultFlyteTaskSelector},
			map[string]string{"execution-id": checkLabelValue, "task-name": checkLabelValue}, ""},
		{"and the chart's default objectSelector", []string{mutate.DefaultFlyteTaskSelector, "execution-id,task-name"},
			map[string]string{"execution-id": checkLabelValue, "task-name": checkLabelValue}, ""},
		{"a value to equal", []string{"execution-id,team=ml"},
			map[string]string{"execution-id": checkLabelValue, "team": "ml"}, ""},
		{"the first value of a set", []string{"tier in (b, a)"}, map[string]string{"tier": "a"}, ""},
		{"a value one selector names, another's set holds", []string{"tier in (a, b)", "tier=b"}, map[string]string{"tier": "b"}, ""},
		{"what a missing label meets", []string{"execution-id,!skip,tier notin (x),team!=ops"},
			map[string]string{"execution-id": checkLabelValue}, ""},
		{"selectors no labels meet", []string{"tier=a", "tier=b"}, nil, "no labels meet"},
		{"a label that must exist and not", []string{"execution-id", "!execution-id"}, nil, "no labels meet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var selectors []labels.Selector
			for _, s := range tc.selectors {
				selector, err := labels.Parse(s)
				if err != nil {
					t.Fatal(err)
				}
				selectors = append(selectors, selector)
			}
			got, err := labelsFor(selectors...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("labelsFor(%q) = %v, %v; want an error with %q", tc.selectors, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("labelsFor(%q) (-want +got):\n%s", tc.selectors, diff)
			}
		})
	}
}

// TestCheckExpects holds what a check expects the API server to store for
// each of its jobs, with the decision flags the chart can pass: always a
// worker command, from the rule each job is for.
func TestCheckExpects(t *testing.T) {
	declared := workerCommand{Command: checkDeclaredCommand, Source: string(mutate.SourceFlyteWorkerArgs)}
	annotated := workerCommand{Command: strings.Fields(checkAnnotatedCommand), Source: string(mutate.SourceWorkerSpecCommand)}
	for _, tc := range []struct {
		name  string
		mode  string
		flags []string
		want  map[string]workerCommand // by case name
	}{
		{"mode webhook", modeWebhook, nil,
			map[string]workerCommand{declaredCase.name: declared, annotatedCase.name: annotated}},
		{"mode both: the policy's rule and the webhook's", modeBoth, nil,
			map[string]workerCommand{declaredCase.name: declared, annotatedCase.name: annotated}},
		{"mode policy: no annotation", modePolicy, nil,
			map[string]workerCommand{declaredCase.name: declared}},
		{"--inject-as=args: the declared command is in the args already", modeWebhook, []string{"--inject-as=args"}, map[string]workerCommand{
			declaredCase.name:  {Args: checkDeclaredCommand},
			annotatedCase.name: {Args: annotated.Command, Source: annotated.Source},
		}},
		{"--inject-as=split", modeWebhook, []string{"--inject-as=split"}, map[string]workerCommand{
			declaredCase.name:  {Command: checkDeclaredCommand[:1], Args: checkDeclaredCommand[1:], Source: declared.Source},
			annotatedCase.name: {Command: annotated.Command[:1], Args: annotated.Command[1:], Source: annotated.Source},
		}},
		{"--infer-worker-command=false: the declared job is left as Flyte made it", modeWebhook, []string{"--infer-worker-command=false"},
			map[string]workerCommand{
				declaredCase.name:  {Args: checkDeclaredCommand},
				annotatedCase.name: annotated,
			}},
		{"a selector and a container of their own", modeWebhook, []string{"--flyte-task-selector=team=ml,execution-id", "--container-name=main"},
			map[string]workerCommand{declaredCase.name: declared, annotatedCase.name: annotated}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := mutate.DefaultOptions()
			fs := subcommandFlags("check", "", &strings.Builder{})
			bindDecisionFlags(fs, &opts)
			if err := fs.Parse(tc.flags); err != nil {
				t.Fatal(err)
			}
			jobLabels, err := labelsFor(opts.FlyteTaskSelector)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]workerCommand{}
			carries := false
			for _, version := range mutate.MPIJobVersions {
				for _, c := range checkCases(tc.mode) {
					w, err := expectedWorkerCommand(opts, checkJob(c, version, "flyte-jobs", opts.ContainerName, "example.com/webhook:v1", jobLabels))
					if err != nil {
						t.Fatal(err)
					}
					got[c.name] = w
					carries = carries || w.Source != ""
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("what the check expects (-want +got):\n%s", diff)
			}
			if !carries {
				t.Errorf("no job of the check carries a worker command")
			}
		})
	}
}

func TestCompareWorkerCommand(t *testing.T) {
	want := workerCommand{Command: checkDeclaredCommand, Source: string(mutate.SourceFlyteWorkerArgs)}
	for _, tc := range []struct {
		name    string
		got     workerCommand
		wantErr []string
	}{
		{"as expected", want, nil},
		{"left as Flyte made it: not called", workerCommand{Args: checkDeclaredCommand},
			[]string{`stored command (none), args /usr/sbin/sshd -De (no source annotation)`, "was not called", "namespace flyte-jobs"}},
		{"another rule", workerCommand{Command: checkDeclaredCommand, Source: string(mutate.SourceFallback)},
			[]string{"(fallback); want command /usr/sbin/sshd -De, args (none) (flyte-worker-args)"}},
		{"args kept", workerCommand{Command: checkDeclaredCommand, Args: []string{"-x"}, Source: want.Source},
			[]string{"args -x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := compareWorkerCommand(tc.got, want, "flyte-jobs")
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("compareWorkerCommand(%v) = nil; want an error", tc.got)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{nil, "-n is required"},
		{[]string{"-n", "x", "--mode", "all"}, `--mode "all": want one of [webhook policy both]`},
		{[]string{"-n", "x", "--mpijob-version", "v2"}, `--mpijob-version "v2": want one of [v1 v2beta1]`},
		{[]string{"-n", "x", "--object-selector", "{"}, "--object-selector"},
		{[]string{"-n", "x", "--object-selector", `{"matchLabels":{"tier":"a"}}`, "--flyte-task-selector", "tier=b"}, "no labels meet"},
		{[]string{"-n", "x", "extra"}, "check takes no arguments"},
	} {
		err := runCheck(tc.args, nil, &strings.Builder{}, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("check %q: %v; want an error with %q", tc.args, err, tc.wantErr)
		}
	}
	err := runUnregister(nil, nil, &strings.Builder{}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "--name is required") {
		t.Errorf("unregister without --name: %v", err)
	}
}
