// Package promtest reads what a Prometheus collector reports, for tests that assert on samples.
package promtest

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Gather registers c in a pedantic registry (which checks it against its descriptions) and returns
// each family's samples, keyed by "label=value,..." with the labels sorted by name.
func Gather(t testing.TB, c prometheus.Collector) map[string]map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		samples := map[string]float64{}
		for _, m := range mf.GetMetric() {
			samples[labels(m)] = value(m)
		}
		out[mf.GetName()] = samples
	}
	return out
}

// labels is m's labels as name=value, sorted by name (as Gather sorts them).
func labels(m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(ls, ",")
}

// value is a counter's or gauge's value, or a histogram's count of observations.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return m.Gauge.GetValue()
}

// Want reports, as test errors, each sample of want (family -> labels -> value) that got lacks or
// has with another value.
func Want(t testing.TB, got, want map[string]map[string]float64) {
	t.Helper()
	for family, samples := range want {
		for l, v := range samples {
			if g, ok := got[family][l]; !ok || g != v {
				t.Errorf("%s{%s} = %v (present %v), want %v", family, l, g, ok, v)
			}
		}
	}
}
