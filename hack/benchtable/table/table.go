// Package table is the one table `make bench` prints: each benchmark writes
// its rows, measured against its reference and its target, to a JSON file,
// and hack/benchtable prints them together. It also holds the statistics the
// benchmarks share.
package table

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"text/tabwriter"
	"time"
)

// Row is one measurement against its reference and its target.
type Row struct {
	// Benchmark names what was measured, and where.
	Benchmark string `json:"benchmark"`
	// Ours and Reference are the figures, with their units.
	Ours      string `json:"ours"`
	Reference string `json:"reference"`
	// Ratio compares them, as the target does: ours/reference, or
	// reference/ours for "times faster".
	Ratio string `json:"ratio"`
	// Target is the target, e.g. "≤ 1.5×".
	Target string `json:"target"`
	// Met says whether the target is met.
	Met bool `json:"met"`
	// Context marks a row that has no target: it explains the others.
	Context bool `json:"context,omitempty"`
}

// Write writes rows to path as JSON.
func Write(path string, rows []Row) error {
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Read reads the rows that Write wrote to path.
func Read(path string) ([]Row, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rows []Row
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// Print prints rows as an aligned table.
func Print(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BENCHMARK\tOURS\tREFERENCE\tRATIO\tTARGET\tMET")
	for _, r := range rows {
		met := "no"
		switch {
		case r.Context:
			met = "-"
		case r.Met:
			met = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Benchmark, r.Ours, r.Reference, r.Ratio, r.Target, met)
	}
	return tw.Flush()
}

// Times formats a ratio, e.g. "1.23×", or "0.897×" below 1, where the targets are closer.
func Times(ratio float64) string {
	if ratio < 1 {
		return fmt.Sprintf("%.3f×", ratio)
	}
	return fmt.Sprintf("%.2f×", ratio)
}

// Percentile returns the p-th percentile (0 < p <= 100) of latencies, by the
// nearest-rank method: a latency that was measured, never an interpolation.
func Percentile(latencies []time.Duration, p float64) time.Duration {
	if len(latencies) == 0 {
		return 0
	}
	sorted := slices.Clone(latencies)
	slices.Sort(sorted)
	rank := int(math.Ceil(float64(len(sorted))*p/100)) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// Median returns the median of xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
