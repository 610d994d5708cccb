package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReliabilityTable holds docs/RELIABILITY.md's table of the bounds to
// the webhook's, defaultLimits, as the "starting" line logs them
// (limits.MarshalLog): every field, each with its value, and nothing else.
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
	if diff := cmp.Diff(documented, asDocumented(defaultLimits())); diff != "" {
		t.Errorf("docs/RELIABILITY.md's table of bounds (-documented +defaultLimits):\n%s", diff)
	}
}

// asDocumented is what the log shows of limits, written as the table writes
// it: durations as the log has them, byte counts in KiB or MiB.
func asDocumented(limits limits) map[string]string {
	out := map[string]string{}
	for name, value := range limits.MarshalLog().(map[string]any) {
		out[name] = fmt.Sprint(value)
		if strings.HasSuffix(name, "Bytes") || strings.HasSuffix(name, "Reserve") {
			switch n := value.(type) {
			case int:
				out[name] = bytesOf(int64(n))
			case int64:
				out[name] = bytesOf(n)
			}
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
