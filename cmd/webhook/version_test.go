package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flyteorg/flyte-mpi-webhook/internal/version"
)

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := runVersion([]string{"-o", "json"}, nil, &stdout, &stderr); err != nil {
		t.Fatalf("version -o json: %v, stderr %s", err, stderr.String())
	}
	var got version.Info
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("version -o json printed %q: %v", stdout.String(), err)
	}
	if diff := cmp.Diff(version.Get(), got); diff != "" {
		t.Errorf("version -o json (-want +got):\n%s", diff)
	}

	stdout.Reset()
	if err := runVersion(nil, nil, &stdout, &stderr); err != nil {
		t.Fatalf("version: %v", err)
	}
	if want := "flyte-mpi-webhook " + got.Version + " (revision "; !strings.HasPrefix(stdout.String(), want) {
		t.Errorf("version printed %q, want it to start with %q", stdout.String(), want)
	}
	if err := runVersion([]string{"-o", "yaml"}, nil, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), `"yaml"`) {
		t.Errorf("version -o yaml: error %v, want one naming \"yaml\"", err)
	}
}
