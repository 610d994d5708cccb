package mutate

import "github.com/flyteorg/flyte-mpi-webhook/internal/truncate"

// maxQuotedBytes is the most of a value that a message quotes. A message
// says what was wrong and where (the byte offset); the rest of a 64 KiB
// value, repeated in every answer and log line, would only fill the logs.
const maxQuotedBytes = 256

// maxMessageBytes bounds a message about an invalid annotation, whatever a
// library quoted into it.
const maxMessageBytes = 1024

// quote quotes s as %q does, truncated after maxQuotedBytes bytes.
func quote(s string) string { return truncate.Quoted(s, maxQuotedBytes) }
