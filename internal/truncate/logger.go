package truncate

import (
	"fmt"
	"reflect"

	"github.com/go-logr/logr"
)

// MaxLogValueBytes bounds each value of a log line, and its message: what a
// client sends may reach a log line (a name, a rejected annotation, a
// library's error that quotes the body), and no client may fill the logs.
const MaxLogValueBytes = 1024

// Logger returns base with every message and value truncated to
// MaxLogValueBytes, as text.
func Logger(base logr.Logger) logr.Logger {
	return logr.New(boundedSink{base.GetSink()})
}

// boundedSink truncates what it passes to the sink it wraps.
type boundedSink struct{ logr.LogSink }

func (s boundedSink) Info(level int, msg string, kv ...any) {
	s.LogSink.Info(level, truncated(msg), truncateValues(kv)...)
}

func (s boundedSink) Error(err error, msg string, kv ...any) {
	if err != nil {
		err = truncatedError{err}
	}
	s.LogSink.Error(err, truncated(msg), truncateValues(kv)...)
}

func (s boundedSink) WithValues(kv ...any) logr.LogSink {
	return boundedSink{s.LogSink.WithValues(truncateValues(kv)...)}
}

func (s boundedSink) WithName(name string) logr.LogSink {
	return boundedSink{s.LogSink.WithName(truncated(name))}
}

// WithCallDepth keeps the caller's line in the log, one frame further up.
func (s boundedSink) WithCallDepth(depth int) logr.LogSink {
	if sink, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return boundedSink{sink.WithCallDepth(depth)}
	}
	return s
}

// truncateValues truncates the values of key/value pairs whose text is
// long; the keys are the code's own.
func truncateValues(kv []any) []any {
	out := make([]any, len(kv))
	for i, v := range kv {
		out[i] = v
		if i%2 == 0 {
			continue
		}
		switch v := v.(type) {
		case string:
			out[i] = truncated(v)
		case error:
			out[i] = truncated(v.Error())
		case fmt.Stringer:
			out[i] = truncated(v.String())
		case []string:
			truncatedList := make([]string, len(v))
			for j, s := range v {
				truncatedList[j] = truncated(s)
			}
			out[i] = truncatedList
		default:
			if r := reflect.ValueOf(v); r.Kind() == reflect.String { // a UID, a name of a type of its own
				out[i] = truncated(r.String())
			}
		}
	}
	return out
}

// truncatedError is an error whose text is truncated.
type truncatedError struct{ error }

func (e truncatedError) Error() string { return truncated(e.error.Error()) }

// truncated is s truncated to MaxLogValueBytes.
func truncated(s string) string { return String(s, MaxLogValueBytes) }
