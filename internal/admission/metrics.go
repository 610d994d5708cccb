package admission

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// decisionsTotal counts the webhook's decisions, beside controller-runtime's
// own controller_runtime_webhook_* request and latency metrics.
var decisionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "flyte_mpi_webhook_decisions_total",
	Help: "Decisions on MPIJob admission reviews, by outcome (mutated, unchanged, skipped_not_flyte, " +
		"denied_invalid, warned_invalid, malformed) and by the source of the worker command (task-custom, " +
		"worker-spec-command, flyte-worker-args, fallback, none).",
}, []string{"outcome", "source"})

func init() {
	metrics.Registry.MustRegister(decisionsTotal)
}

// countDecision counts one decision.
func countDecision(d mutate.Decision) {
	decisionsTotal.WithLabelValues(string(d.Outcome), string(d.Source)).Inc()
}
