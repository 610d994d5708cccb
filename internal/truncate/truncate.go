// Package truncate bounds text that a client can make long (a name, an
// annotation, a library's error that quotes the body) before it goes into
// an answer or a log line. It is the one truncator: every bounded text ends
// alike, with its first bytes, an ellipsis and its whole length, so that a
// reader knows how much was left out. Logger applies it to every log line.
package truncate

import (
	"fmt"
	"strconv"
)

// MaxQuotedBytes is the most of a value that a message quotes (Quoted). A
// message says what was wrong and where (the byte offset); the rest of a
// 64 KiB value, repeated in every answer and log line, would only fill the
// logs.
const MaxQuotedBytes = 256

// String returns s when it is at most max bytes long; else its first max
// bytes followed by "… (N bytes)", N being the length of s.
func String(s string, max int) string {
	kept, note := split(s, max)
	return kept + note
}

// Quoted returns s quoted as %q quotes it; when s is longer than max bytes,
// only its first max bytes are quoted, followed by String's note.
func Quoted(s string, max int) string {
	kept, note := split(s, max)
	return strconv.Quote(kept) + note
}

// split is the rule both share: what of s is kept, and the note that says
// how long s was; the note is empty when s is kept whole.
func split(s string, max int) (kept, note string) {
	if len(s) <= max {
		return s, ""
	}
	return s[:max], fmt.Sprintf("… (%d bytes)", len(s))
}
