package server

import (
	"fmt"
	"reflect"

	"github.com/go-logr/logr"
)

// MaxLogValueBytes bounds each value of a log line, and its message: what a
// client sends may reach a log line (a name, a rejected annotation, a
// library's error that quotes the body), and no client may fill the logs.
const MaxLogValueBytes = 1024

// BoundedLogger returns base with every message and value cut to
// MaxLogValueBytes, as text.
func BoundedLogger(base logr.Logger) logr.Logger {
	return logr.New(boundedSink{base.GetSink()})
}

// boundedSink cuts what it passes to the sink it wraps.
type boundedSink struct{ logr.LogSink }

func (s boundedSink) Info(level int, msg string, kv ...any) {
	s.LogSink.Info(level, cut(msg), cutValues(kv)...)
}

func (s boundedSink) Error(err error, msg string, kv ...any) {
	if err != nil {
		err = cutError{err}
	}
	s.LogSink.Error(err, cut(msg), cutValues(kv)...)
}

func (s boundedSink) WithValues(kv ...any) logr.LogSink {
	return boundedSink{s.LogSink.WithValues(cutValues(kv)...)}
}

func (s boundedSink) WithName(name string) logr.LogSink {
	return boundedSink{s.LogSink.WithName(cut(name))}
}

// WithCallDepth keeps the caller's line in the log, one frame further up.
func (s boundedSink) WithCallDepth(depth int) logr.LogSink {
	if sink, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return boundedSink{sink.WithCallDepth(depth)}
	}
	return s
}

// cutValues cuts the values of key/value pairs whose text is long; the keys
// are the code's own.
func cutValues(kv []any) []any {
	out := make([]any, len(kv))
	for i, v := range kv {
		out[i] = v
		if i%2 == 0 {
			continue
		}
		switch v := v.(type) {
		case string:
			out[i] = cut(v)
		case error:
			out[i] = cut(v.Error())
		case fmt.Stringer:
			out[i] = cut(v.String())
		case []string:
			cutList := make([]string, len(v))
			for j, s := range v {
				cutList[j] = cut(s)
			}
			out[i] = cutList
		default:
			if r := reflect.ValueOf(v); r.Kind() == reflect.String { // a UID, a name of a type of its own
				out[i] = cut(r.String())
			}
		}
	}
	return out
}

// cutError is an error whose text is cut.
type cutError struct{ error }

func (e cutError) Error() string { return cut(e.error.Error()) }

func cut(s string) string {
	if len(s) <= MaxLogValueBytes {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:MaxLogValueBytes], len(s))
}
