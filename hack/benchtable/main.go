// Command benchtable prints the one table `make bench` ends with: the
// in-process benchmark's ratios, from `go test -bench` output, and the rows
// the other benchmarks wrote (hack/load, test/envtest/bench).
//
//	benchtable -admit admit.txt load.json apiserver.json
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/flyteorg/flyte-mpi-webhook/hack/benchtable/table"
)

// The targets for the in-process benchmark.
const (
	targetFloorTime       = 1.5 // at most this many times the floor's ns/op
	targetFloorAllocs     = 2.0 // at most this many times the floor's allocs/op
	targetConventionalWin = 3.0 // at least this many times faster than the conventional way
)

func main() {
	admit := flag.String("admit", "", "output of go test -bench BenchmarkAdmit -benchmem (internal/admission)")
	flag.Parse()
	var rows []table.Row
	if *admit != "" {
		r, err := admitRows(*admit)
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		rows = append(rows, r...)
	}
	for _, path := range flag.Args() {
		r, err := table.Read(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		rows = append(rows, r...)
	}
	if err := table.Print(os.Stdout, rows); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// benchLine matches a result of BenchmarkAdmit, e.g.
// "BenchmarkAdmit/version=v1/path=webhook-2  4059  77954 ns/op  49.43 MB/s  56016 cpu-ns/op  11543 B/op  231 allocs/op".
var benchLine = regexp.MustCompile(`^BenchmarkAdmit/version=([^/]+)/path=(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// admitRows reads go test -bench output and compares, per MPIJob version,
// the medians of the webhook's path with the floor's and the conventional way's.
func admitRows(path string) ([]table.Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// samples[version][path][unit] are the values of every run.
	samples := map[string]map[string]map[string][]float64{}
	var versions []string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		m := benchLine.FindStringSubmatch(scanner.Text())
		if m == nil {
			continue
		}
		version, p, fields := m[1], m[2], strings.Fields(m[4])
		if samples[version] == nil {
			samples[version] = map[string]map[string][]float64{}
			versions = append(versions, version)
		}
		if samples[version][p] == nil {
			samples[version][p] = map[string][]float64{}
		}
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", path, scanner.Text(), err)
			}
			samples[version][p][fields[i+1]] = append(samples[version][p][fields[i+1]], v)
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("%s: no BenchmarkAdmit results", path)
	}

	var rows []table.Row
	for _, version := range versions {
		median := func(p, unit string) (float64, error) {
			values := samples[version][p][unit]
			if len(values) == 0 {
				return 0, fmt.Errorf("%s: no %s for %s/%s", path, unit, version, p)
			}
			return table.Median(values), nil
		}
		var err error
		value := func(p, unit string) float64 {
			v, e := median(p, unit)
			if err == nil {
				err = e
			}
			return v
		}
		ours, floor, conventional := value("webhook", "ns/op"), value("floor", "ns/op"), value("conventional", "ns/op")
		oursCPU, floorCPU, conventionalCPU := value("webhook", "cpu-ns/op"), value("floor", "cpu-ns/op"), value("conventional", "cpu-ns/op")
		oursAllocs, floorAllocs := value("webhook", "allocs/op"), value("floor", "allocs/op")
		if err != nil {
			return nil, err
		}
		rows = append(rows,
			table.Row{
				Benchmark: fmt.Sprintf("in process: %s ns/op vs floor", version),
				Ours:      micros(ours), Reference: micros(floor),
				Ratio:  fmt.Sprintf("%s (cpu %s)", table.Times(ours/floor), table.Times(oursCPU/floorCPU)),
				Target: fmt.Sprintf("≤ %.1f×", targetFloorTime), Met: ours <= targetFloorTime*floor,
			},
			table.Row{
				Benchmark: fmt.Sprintf("in process: %s allocs/op vs floor", version),
				Ours:      fmt.Sprintf("%.0f", oursAllocs), Reference: fmt.Sprintf("%.0f", floorAllocs),
				Ratio:  table.Times(oursAllocs / floorAllocs),
				Target: fmt.Sprintf("≤ %.0f×", targetFloorAllocs), Met: oursAllocs <= targetFloorAllocs*floorAllocs,
			},
			table.Row{
				Benchmark: fmt.Sprintf("in process: %s conventional/ours", version),
				Ours:      micros(ours), Reference: micros(conventional),
				Ratio:  fmt.Sprintf("%s faster (cpu %s)", table.Times(conventional/ours), table.Times(conventionalCPU/oursCPU)),
				Target: fmt.Sprintf("≥ %.0f× faster", targetConventionalWin), Met: conventional >= targetConventionalWin*ours,
			},
		)
	}
	return rows, nil
}

func micros(ns float64) string { return fmt.Sprintf("%.1f µs", ns/1000) }
