package server_test

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

// TestReliabilityTable holds docs/RELIABILITY.md's table of the bounds to
// server.DefaultLimits: every field, each with its value, and nothing else.
func TestReliabilityTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/RELIABILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	table := regexp.MustCompile("(?m)^\\| `Limits` field \\| value \\|\n\\|---\\|---\\|\n((?:\\|.*\n)+)").FindSubmatch(doc)
	if table == nil {
		t.Fatal("docs/RELIABILITY.md has no table headed | `Limits` field | value |")
	}
	documented := map[string]string{}
	for _, row := range strings.Split(strings.TrimSpace(string(table[1])), "\n") {
		cells := strings.Split(strings.Trim(row, "| "), " | ")
		documented[strings.Trim(cells[0], "`")] = cells[len(cells)-1]
	}
	if diff := cmp.Diff(documented, fields(server.DefaultLimits())); diff != "" {
		t.Errorf("docs/RELIABILITY.md's table of bounds (-documented +DefaultLimits):\n%s", diff)
	}
}

// fields are v's fields, an embedded struct's included, as the table writes them.
func fields(v any) map[string]string {
	out := map[string]string{}
	value := reflect.ValueOf(v)
	for i := range value.NumField() {
		f, x := value.Type().Field(i), value.Field(i)
		switch {
		case f.Anonymous:
			for name, s := range fields(x.Interface()) {
				out[name] = s
			}
		case x.Type() == reflect.TypeFor[time.Duration]():
			out[f.Name] = x.Interface().(time.Duration).String()
		case strings.HasSuffix(f.Name, "Bytes") || strings.HasSuffix(f.Name, "Reserve"):
			out[f.Name] = bytesOf(x.Int())
		default:
			out[f.Name] = fmt.Sprint(x.Interface())
		}
	}
	return out
}

// bytesOf writes n bytes as the docs do: in MiB or KiB when a whole number of them.
func bytesOf(n int64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprint(n)
}
