package main

import (
	"reflect"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

// limits are every bound on what a client can make the webhook hold, one
// table: the server's (connections, TLS handshakes, requests, the probe and
// metrics ports) and the review's (bodies, the reviews being decided).
// serve builds the server and the handler from it, and logs it at start
// (the "starting" line's limits); TestReliabilityTable holds
// docs/RELIABILITY.md's table to it.
type limits struct {
	server server.Limits
	review admission.Limits
}

// defaultLimits is the table the webhook runs with: each package's
// defaults, the review reading a body within the server's ReadTimeout.
func defaultLimits() limits {
	l := limits{server: server.DefaultLimits(), review: admission.DefaultLimits()}
	l.review.ReadTimeout = l.server.ReadTimeout
	return l
}

// MarshalLog logs every bound by its field's name, durations as Go writes
// them (logr.Marshaler); ReadTimeout, the server's and the review's, once.
func (l limits) MarshalLog() any {
	fields := map[string]any{}
	for _, v := range []reflect.Value{reflect.ValueOf(l.server.Limits), reflect.ValueOf(l.server), reflect.ValueOf(l.review)} {
		for i := range v.NumField() {
			if f := v.Type().Field(i); !f.Anonymous {
				fields[f.Name] = v.Field(i).Interface()
				if d, ok := fields[f.Name].(time.Duration); ok {
					fields[f.Name] = d.String()
				}
			}
		}
	}
	return fields
}
