package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server/conns"
)

// The bounds on what a client can make the webhook hold; docs/RELIABILITY.md
// has why each is what it is.
const (
	// MaxBodyBytes bounds a request's body, as the API server bounds it.
	MaxBodyBytes = 3 << 20

	// MaxHeaderBytes bounds a request's headers, as nginx's default does.
	MaxHeaderBytes = 32 << 10

	// ReadHeaderTimeout bounds the time a request's headers may take to arrive.
	ReadHeaderTimeout = 5 * time.Second

	// ReadTimeout bounds a whole request from its first byte.
	ReadTimeout = 10 * time.Second

	// WriteTimeout bounds the time from a request's headers to the end of its answer.
	WriteTimeout = ReadTimeout + 5*time.Second

	// IdleTimeout closes a keep-alive connection that carries no request,
	// as controller-runtime's server does.
	IdleTimeout = 90 * time.Second

	// MaxDeciding caps the requests being decided at once: twice the Deployment's cores.
	MaxDeciding = 4

	// DecideWait bounds how long a request waits for its turn: the API server's timeoutSeconds.
	DecideWait = 5 * time.Second

	// MaxBufferedBytes caps the Content-Length of the bodies arriving or being answered.
	MaxBufferedBytes = 6 << 20

	// SmallRequestBytes is the largest body counted as small: a Flyte MPIJob's review is a few KiB.
	SmallRequestBytes = 256 << 10

	// SmallRequestReserve is the part of MaxBufferedBytes only small bodies may use.
	SmallRequestReserve = 2 << 20

	// RetryAfterSeconds is the Retry-After of a 503.
	RetryAfterSeconds = 1
)

var (
	errBusy    = errors.New("the webhook is busy: too many requests in flight, or too many request bytes held")
	errAborted = errors.New("the request body arrived too slowly while the webhook was short of memory")
	errTooSlow = fmt.Errorf("the body did not arrive within %s", ReadTimeout)
)

// limiter holds what MaxDeciding and MaxBufferedBytes bound.
type limiter struct {
	deciding                      *conns.Gate
	maxBytes, reserve, smallBytes int64
	wait                          time.Duration // how long a large body waits for the budget

	mu       sync.Mutex
	bytes    int64         // the Content-Length of the bodies arriving or being answered
	arriving []*body       // the bodies still being read, oldest first
	freed    chan struct{} // closed, and replaced, when bytes are given back
}

func newLimiter() *limiter {
	return &limiter{deciding: conns.NewGate(MaxDeciding),
		maxBytes: MaxBufferedBytes, reserve: SmallRequestReserve, smallBytes: SmallRequestBytes, wait: ReadTimeout,
		freed: make(chan struct{})}
}

// body is one request's body, from its length taken from the budget to its answer.
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
		case b.length <= l.smallBytes:
			return errBusy
		case deadline == nil:
			timer := time.NewTimer(l.wait)
			defer timer.Stop()
			deadline = timer.C
		}
		select {
		case <-freed:
		case <-deadline:
			return errTooSlow
		}
	}
}

func (l *limiter) claimLocked(b *body) bool {
	small, budget := b.length <= l.smallBytes, l.maxBytes
	if !small {
		budget -= l.reserve
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

// limit wraps next: it serves only a POST whose Content-Length is within
// MaxBodyBytes, and passes on its body read whole (wholeBody), so that the
// handler never waits for a client.
func (l *limiter) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodPost:
			w.Header().Set("Allow", http.MethodPost)
			refuse(w, http.StatusMethodNotAllowed, errors.New("only POST is served"))
			return
		case r.ContentLength < 0:
			refuse(w, http.StatusLengthRequired, errors.New("a Content-Length is required: the API server always sends one"))
			return
		case r.ContentLength > MaxBodyBytes:
			refuse(w, http.StatusRequestEntityTooLarge,
				fmt.Errorf("the body is %d bytes, more than the %d served", r.ContentLength, MaxBodyBytes))
			return
		}
		rc := http.NewResponseController(w)
		// A read deadline in the past, which any goroutine may set, wakes the read below.
		b := &body{length: r.ContentLength, abort: func() { _ = rc.SetReadDeadline(time.Unix(1, 0)) }}
		if err := l.claim(b); errors.Is(err, errTooSlow) {
			refuse(w, http.StatusRequestTimeout, err)
			return
		} else if err != nil {
			refuse(w, http.StatusServiceUnavailable, err)
			return
		}
		defer l.free(b)
		buf := make([]byte, b.length)
		_, err := io.ReadFull(r.Body, buf)
		switch {
		case l.arrived(b):
			refuse(w, http.StatusServiceUnavailable, errAborted)
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			refuse(w, http.StatusRequestTimeout, errTooSlow)
			return
		case err != nil:
			refuse(w, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err))
			return
		}
		ticket, err := l.deciding.Enter(conns.ClientAddress(r.RemoteAddr), time.Now().Add(DecideWait))
		if err != nil {
			refuse(w, http.StatusServiceUnavailable, fmt.Errorf("%w: %w", errBusy, err))
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
// to a handler that asks (internal/admission's readBody).
type wholeBody struct {
	*bytes.Reader
	bytes []byte
}

func (b wholeBody) Bytes() []byte { return b.bytes }

func (wholeBody) Close() error { return nil }

// refuse answers a request the limiter will not pass on. Its body is not
// read to its end, so the connection cannot carry another request.
func refuse(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Connection", "close")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	http.Error(w, err.Error(), status)
}
