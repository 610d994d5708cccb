package monitoring

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Family is one metric family of a scrape.
type Family struct {
	// Name is the family's name: for a histogram or a summary, without the
	// _bucket, _sum and _count that PromQL names its series by.
	Name string
	// Type is counter, gauge, histogram, summary or untyped.
	Type string
	// Source is what exported it: "webhook", "kube-apiserver".
	Source string
	// Series are the label sets of its series, le and quantile left out.
	Series []map[string]string
}

// LabelValues returns each label of the family's series and the values seen, sorted.
func (f *Family) LabelValues() map[string][]string {
	seen := map[string]map[string]bool{}
	for _, s := range f.Series {
		for k, v := range s {
			if seen[k] == nil {
				seen[k] = map[string]bool{}
			}
			seen[k][v] = true
		}
	}
	out := map[string][]string{}
	for k, values := range seen {
		out[k] = slices.Sorted(maps.Keys(values))
	}
	return out
}

// ParseScrape reads a /metrics answer in Prometheus' text format, with the
// legacy names that Prometheus 2.42 accepts, as exported by source.
func ParseScrape(source string, r io.Reader) ([]*Family, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	parsed, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("the metrics of %s: %w", source, err)
	}
	var families []*Family
	for _, name := range slices.Sorted(maps.Keys(parsed)) {
		mf := parsed[name]
		f := &Family{Name: name, Type: strings.ToLower(mf.GetType().String()), Source: source}
		for _, m := range mf.GetMetric() {
			f.Series = append(f.Series, labelSet(m.GetLabel()))
		}
		families = append(families, f)
	}
	return families, nil
}

func labelSet(pairs []*dto.LabelPair) map[string]string {
	set := make(map[string]string, len(pairs))
	for _, p := range pairs {
		set[p.GetName()] = p.GetValue()
	}
	return set
}

// Series is what PromQL sees of a metric name: its family and its labels.
type Series struct {
	// Family is the family whose series the name is, nil for one a rule records.
	Family *Family
	// Labels are the label names its series carry, le and quantile included.
	Labels map[string]bool
	// Origin says where the name comes from, for the messages: the family's
	// source and type, or the rule that records it.
	Origin string
}

// Index maps each metric name that PromQL can select to its Series: a
// counter's or a gauge's family name, a histogram's name_bucket (with le),
// name_sum and name_count, a summary's name (with quantile), name_sum and
// name_count.
type Index map[string]*Series

// NewIndex indexes the families of one or more scrapes. A name exported by
// two sources gets the union of their labels.
func NewIndex(families ...[]*Family) Index {
	ix := Index{}
	for _, fs := range families {
		for _, f := range fs {
			labels := map[string]bool{}
			for _, s := range f.Series {
				for k := range s {
					labels[k] = true
				}
			}
			origin := fmt.Sprintf("a %s of %s", f.Type, f.Source)
			with := func(extra string) map[string]bool {
				l := maps.Clone(labels)
				if extra != "" {
					l[extra] = true
				}
				return l
			}
			switch f.Type {
			case "histogram", "gaugehistogram":
				ix.add(f.Name+"_bucket", &Series{Family: f, Labels: with(model.BucketLabel), Origin: origin})
				ix.add(f.Name+"_sum", &Series{Family: f, Labels: with(""), Origin: origin})
				ix.add(f.Name+"_count", &Series{Family: f, Labels: with(""), Origin: origin})
			case "summary":
				ix.add(f.Name, &Series{Family: f, Labels: with(model.QuantileLabel), Origin: origin})
				ix.add(f.Name+"_sum", &Series{Family: f, Labels: with(""), Origin: origin})
				ix.add(f.Name+"_count", &Series{Family: f, Labels: with(""), Origin: origin})
			default:
				ix.add(f.Name, &Series{Family: f, Labels: with(""), Origin: origin})
			}
		}
	}
	return ix
}

func (ix Index) add(name string, s *Series) {
	if old, ok := ix[name]; ok {
		maps.Copy(old.Labels, s.Labels)
		old.Origin += " and " + s.Origin
		return
	}
	ix[name] = s
}

// Family returns the family that a name PromQL selects belongs to, for the
// messages: "x is a histogram: select x_bucket, x_sum or x_count".
func (ix Index) familyOf(name string) *Family {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if s, ok := ix[name+suffix]; ok && s.Family != nil && s.Family.Name == name {
			return s.Family
		}
	}
	return nil
}
