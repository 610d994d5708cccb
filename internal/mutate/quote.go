package mutate

import "github.com/flyteorg/flyte-mpi-webhook/internal/truncate"

// maxMessageBytes bounds a message about an invalid annotation, whatever a
// library quoted into it.
const maxMessageBytes = 1024

// quote quotes s as %q does, truncated after truncate.MaxQuotedBytes bytes.
func quote(s string) string { return truncate.Quoted(s, truncate.MaxQuotedBytes) }
