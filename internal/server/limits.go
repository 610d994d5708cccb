package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server/conns"
)

// Limits are every bound on what a client can make the webhook hold, one
// value, logged at start. docs/RELIABILITY.md says why each is what it is,
// and TestReliabilityTable holds its table to DefaultLimits.
type Limits struct {
	// conns.Limits bounds the webhook port's connections and TLS handshakes.
	conns.Limits

	// MaxHeaderBytes bounds a request's headers, and ReadHeaderTimeout the time they may take.
	MaxHeaderBytes    int
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds a whole request from its first byte, and WriteTimeout the time from its headers to its answer's end.
	ReadTimeout, WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that carries no request.
	IdleTimeout time.Duration

	MaxBodyBytes int64
	// MaxBufferedBytes caps the Content-Length of the bodies arriving or being answered, SmallRequestReserve of it
	// kept for bodies of at most SmallRequestBytes.
	MaxBufferedBytes, SmallRequestReserve, SmallRequestBytes int64

	// MaxDeciding caps the requests being decided at once, and DecideWait how long one waits for its turn.
	MaxDeciding int
	DecideWait  time.Duration
	// RetryAfter is the Retry-After of a 503.
	RetryAfter time.Duration

	// MaxProbeConns and MaxProbeHeaderBytes bound the probe and metrics ports, each.
	MaxProbeConns, MaxProbeHeaderBytes int
}

// DefaultLimits returns the bounds the webhook runs with: with the process's
// own descriptors, the three ports' connections fit a limit of 1,024.
func DefaultLimits() Limits {
	const beforeRequest = 5 * time.Second // from a connection's accept to its handshake's end, or to a request's headers
	return Limits{
		Limits: conns.Limits{
			MaxConns:            512,
			MaxHandshakes:       16,
			SlowHandshake:       time.Second,
			HandshakeTimeout:    beforeRequest,
			MaxClientHelloBytes: 16 << 10,
			QuietFloor:          250 * time.Millisecond,
		},
		MaxHeaderBytes:      32 << 10, // nginx's default
		ReadHeaderTimeout:   beforeRequest,
		ReadTimeout:         10 * time.Second,
		WriteTimeout:        15 * time.Second,
		IdleTimeout:         90 * time.Second, // controller-runtime's
		MaxBodyBytes:        3 << 20,          // the API server's own bound on a request body
		MaxBufferedBytes:    6 << 20,
		SmallRequestReserve: 2 << 20,
		SmallRequestBytes:   256 << 10,       // a Flyte MPIJob's review is a few KiB
		MaxDeciding:         4,               // twice the Deployment's cores
		DecideWait:          5 * time.Second, // the API server's timeoutSeconds
		RetryAfter:          time.Second,
		MaxProbeConns:       192,
		MaxProbeHeaderBytes: 8 << 10, // a bearer token at most
	}
}

// MarshalLog logs every field by its name, durations as Go writes them (logr.Marshaler).
func (l Limits) MarshalLog() any {
	fields := map[string]any{}
	for _, v := range []reflect.Value{reflect.ValueOf(l.Limits), reflect.ValueOf(l)} {
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

var (
	errBusy    = errors.New("the webhook is busy: too many requests in flight, or too many request bytes held")
	errAborted = errors.New("the request body arrived too slowly while the webhook was short of memory")
)

// limiter holds what MaxDeciding and MaxBufferedBytes bound.
type limiter struct {
	Limits
	deciding   *conns.Gate
	errTooSlow error

	mu       sync.Mutex
	bytes    int64         // the Content-Length of the bodies arriving or being answered
	arriving []*body       // oldest first
	freed    chan struct{} // closed, and replaced, when bytes are given back
}

func newLimiter(limits Limits) *limiter {
	return &limiter{Limits: limits, deciding: conns.NewGate(limits.MaxDeciding),
		errTooSlow: fmt.Errorf("the body did not arrive within %s", limits.ReadTimeout), freed: make(chan struct{})}
}

type body struct {
	length  int64
	abort   func() // stops a read under way
	aborted bool
}

// claim takes b's length from the budget before its first byte is read. A
// small body aborts the bodies still arriving, oldest first: the API server
// sends a body at once, so those are slow clients'. A large one waits for
// the budget, unread, until its deadline.
func (l *limiter) claim(b *body) error {
	var deadline <-chan time.Time
	for {
		l.mu.Lock()
		claimed, freed := l.claimLocked(b), l.freed
		l.mu.Unlock()
		switch {
		case claimed:
			return nil
		case b.length <= l.SmallRequestBytes:
			return errBusy
		case deadline == nil:
			timer := time.NewTimer(l.ReadTimeout) // as long as its read may take
			defer timer.Stop()
			deadline = timer.C
		}
		select {
		case <-freed:
		case <-deadline:
			return l.errTooSlow
		}
	}
}

func (l *limiter) claimLocked(b *body) bool {
	small, budget := b.length <= l.SmallRequestBytes, l.MaxBufferedBytes
	if !small {
		budget -= l.SmallRequestReserve
	}
	for l.bytes+b.length > budget {
		if !small || len(l.arriving) == 0 {
			return false
		}
		oldest := l.arriving[0]
		l.arriving = l.arriving[1:]
		l.bytes -= oldest.length
		oldest.aborted = true
		oldest.abort()
	}
	l.bytes += b.length
	l.arriving = append(l.arriving, b)
	return true
}

// arrived marks b read, whole or not, and reports whether it was aborted.
func (l *limiter) arrived(b *body) (aborted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.arriving = slices.DeleteFunc(l.arriving, func(a *body) bool { return a == b })
	return b.aborted
}

// free gives b's length back to the budget, once it has arrived.
func (l *limiter) free(b *body) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !b.aborted { // an aborted body's bytes went to the body that aborted it
		l.bytes -= b.length
		close(l.freed) // wakes the large bodies waiting for the budget
		l.freed = make(chan struct{})
	}
}

// limit serves next only a POST whose Content-Length is within
// MaxBodyBytes, its body read whole: next never waits for a client.
func (l *limiter) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodPost:
			w.Header().Set("Allow", http.MethodPost)
			l.refuse(w, http.StatusMethodNotAllowed, errors.New("only POST is served"))
			return
		case r.ContentLength < 0:
			l.refuse(w, http.StatusLengthRequired, errors.New("a Content-Length is required: the API server always sends one"))
			return
		case r.ContentLength > l.MaxBodyBytes:
			l.refuse(w, http.StatusRequestEntityTooLarge,
				fmt.Errorf("the body is %d bytes, more than the %d served", r.ContentLength, l.MaxBodyBytes))
			return
		}
		rc := http.NewResponseController(w)
		// A read deadline in the past, which any goroutine may set, wakes the read below.
		b := &body{length: r.ContentLength, abort: func() { _ = rc.SetReadDeadline(time.Unix(1, 0)) }}
		if err := l.claim(b); errors.Is(err, l.errTooSlow) {
			l.refuse(w, http.StatusRequestTimeout, err)
			return
		} else if err != nil {
			l.refuse(w, http.StatusServiceUnavailable, err)
			return
		}
		defer l.free(b)
		buf := make([]byte, b.length)
		_, err := io.ReadFull(r.Body, buf)
		switch {
		case l.arrived(b):
			l.refuse(w, http.StatusServiceUnavailable, errAborted)
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			l.refuse(w, http.StatusRequestTimeout, l.errTooSlow)
			return
		case err != nil:
			l.refuse(w, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err))
			return
		}
		ticket, err := l.deciding.Enter(conns.ClientAddress(r.RemoteAddr), time.Now().Add(l.DecideWait))
		if err != nil {
			l.refuse(w, http.StatusServiceUnavailable, fmt.Errorf("%w: %w", errBusy, err))
			return
		}
		// The answer is written holding the place: clients that never read
		// answers of up to 4 MiB delay no review (make soak's slow-reader).
		defer l.deciding.Leave(ticket) // a panic, which net/http recovers, frees the place too
		r.Body = wholeBody{bytes.NewReader(buf), buf}
		next.ServeHTTP(w, r)
	})
}

// wholeBody is a request's body read whole: Bytes gives it, without a copy,
// to internal/admission's reader.
type wholeBody struct {
	*bytes.Reader
	bytes []byte
}

func (b wholeBody) Bytes() []byte { return b.bytes }

func (wholeBody) Close() error { return nil }

// refuse answers a request the limiter will not pass on. Its body is not
// read to its end, so the connection cannot carry another request.
func (l *limiter) refuse(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Connection", "close")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(l.RetryAfter.Seconds())))
	}
	http.Error(w, err.Error(), status)
}
