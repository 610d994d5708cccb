package truncate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// TestLogger checks that long messages and values are truncated, whatever their type.
func TestLogger(t *testing.T) {
	long := strings.Repeat("<", 3*MaxLogValueBytes)
	want := fmt.Sprintf("%s… (%d bytes)", strings.Repeat("<", MaxLogValueBytes), len(long))
	var got map[string]any
	sink := funcr.NewJSON(func(obj string) {
		if err := json.Unmarshal([]byte(obj), &got); err != nil {
			t.Fatal(err)
		}
	}, funcr.Options{})
	log := Logger(sink).WithValues("uid", types.UID(long))
	log.Info(long, "string", long, "error", errors.New(long), "list", []string{long}, "short", "kept", "number", 1)
	for key, value := range map[string]any{"msg": want, "uid": want, "string": want, "error": want,
		"list": []any{want}, "short": "kept", "number": float64(1)} {
		if diff := cmp.Diff(value, got[key]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", key, diff)
		}
	}
	log.Error(errors.New(long), "failed")
	if diff := cmp.Diff(want, got["error"]); diff != "" {
		t.Errorf("Error's error (-want +got):\n%s", diff)
	}
}
