package mutate

import (
	"fmt"
	"strconv"
)

// maxQuotedBytes is the most of a value that a message quotes. A message
// says what was wrong and where (the byte offset); the rest of a 64 KiB
// value, repeated in every answer and log line, would only fill the logs.
const maxQuotedBytes = 256

// maxMessageBytes bounds a message about an invalid annotation, whatever a
// library quoted into it.
const maxMessageBytes = 1024

// quote quotes s as %q does, cut after maxQuotedBytes bytes.
func quote(s string) string {
	if len(s) <= maxQuotedBytes {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:maxQuotedBytes]), len(s))
}

// Truncate cuts s after maxMessageBytes bytes, saying how long it was.
func Truncate(s string) string {
	if len(s) <= maxMessageBytes {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:maxMessageBytes], len(s))
}
