package admission

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/fair"
)

// Limits are the review's bounds: on bodies, and on the reviews being
// decided. cmd/webhook builds them beside internal/server's from one
// table, and logs them at start; docs/RELIABILITY.md says why each is what
// it is. Each field's default is DefaultLimits'.
type Limits struct {
	// MaxBodyBytes bounds a body's Content-Length. Defaults to 3 MiB.
	MaxBodyBytes int64
	// MaxBufferedBytes caps the Content-Length of the bodies arriving or being answered. Defaults to 6 MiB.
	MaxBufferedBytes int64
	// SmallRequestReserve is the part of MaxBufferedBytes kept for bodies of at most SmallRequestBytes.
	// Defaults to 2 MiB.
	SmallRequestReserve int64
	// SmallRequestBytes is the largest body SmallRequestReserve is kept for. Defaults to 256 KiB.
	SmallRequestBytes int64
	// MaxDeciding caps the requests being decided at once. Defaults to 4.
	MaxDeciding int
	// DecideWait is how long a request waits for its turn to be decided. Defaults to 5s.
	DecideWait time.Duration
	// RetryAfter is the Retry-After of a 503. Defaults to 1s.
	RetryAfter time.Duration
	// ReadTimeout is the server's, which bounds a whole request from its first byte: a large body
	// waits as long for the budget, and one that has not arrived by then is answered 408. Defaults to 10s.
	ReadTimeout time.Duration
}

// DefaultLimits returns the bounds the webhook runs with.
func DefaultLimits() Limits {
	return Limits{
		MaxBodyBytes:        3 << 20, // the API server's own bound on a request body
		MaxBufferedBytes:    6 << 20,
		SmallRequestReserve: 2 << 20,
		SmallRequestBytes:   256 << 10,       // a Flyte MPIJob's review is a few KiB
		MaxDeciding:         4,               // twice the Deployment's cores
		DecideWait:          5 * time.Second, // the API server's timeoutSeconds
		RetryAfter:          time.Second,
		ReadTimeout:         10 * time.Second,
	}
}

var (
	errBusy    = errors.New("the webhook is busy: too many requests in flight, or too many request bytes held")
	errAborted = errors.New("the request body arrived too slowly while the webhook was short of memory")
)

// limiter holds what MaxDeciding and MaxBufferedBytes bound: the reviews
// being decided, and the bytes of their bodies.
type limiter struct {
	Limits
	deciding   *fair.Gate
	errTooSlow error

	mu       sync.Mutex
	bytes    int64         // the Content-Length of the bodies arriving or being answered
	arriving []*body       // oldest first
	freed    chan struct{} // closed, and replaced, when bytes are given back
}

func newLimiter(limits Limits) *limiter {
	return &limiter{Limits: limits, deciding: fair.NewGate(limits.MaxDeciding),
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

// read reads r's body whole, once its Content-Length is within MaxBodyBytes
// and the budget's, then waits for a place among the reviews being decided:
// the review never waits for a client. A request it refuses is answered
// here (ok false); else the body's bytes and its place are held until done.
func (l *limiter) read(w http.ResponseWriter, r *http.Request) (buf []byte, done func(), ok bool) {
	switch {
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		l.refuse(w, http.StatusMethodNotAllowed, errors.New("only POST is served"))
		return nil, nil, false
	case r.ContentLength < 0:
		l.refuse(w, http.StatusLengthRequired, errors.New("a Content-Length is required: the API server always sends one"))
		return nil, nil, false
	case r.ContentLength > l.MaxBodyBytes:
		l.refuse(w, http.StatusRequestEntityTooLarge,
			fmt.Errorf("the body is %d bytes, more than the %d served", r.ContentLength, l.MaxBodyBytes))
		return nil, nil, false
	}
	rc := http.NewResponseController(w)
	// A read deadline in the past, which any goroutine may set, wakes the read below.
	b := &body{length: r.ContentLength, abort: func() { _ = rc.SetReadDeadline(time.Unix(1, 0)) }}
	if err := l.claim(b); errors.Is(err, l.errTooSlow) {
		l.refuse(w, http.StatusRequestTimeout, err)
		return nil, nil, false
	} else if err != nil {
		l.refuse(w, http.StatusServiceUnavailable, err)
		return nil, nil, false
	}
	defer func() {
		if !ok {
			l.free(b)
		}
	}()
	buf = make([]byte, b.length)
	_, err := io.ReadFull(r.Body, buf)
	switch {
	case l.arrived(b):
		l.refuse(w, http.StatusServiceUnavailable, errAborted)
		return nil, nil, false
	case errors.Is(err, os.ErrDeadlineExceeded):
		l.refuse(w, http.StatusRequestTimeout, l.errTooSlow)
		return nil, nil, false
	case err != nil:
		l.refuse(w, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err))
		return nil, nil, false
	}
	ticket, err := l.deciding.Enter(fair.ClientAddress(r.RemoteAddr), time.Now().Add(l.DecideWait))
	if err != nil {
		l.refuse(w, http.StatusServiceUnavailable, fmt.Errorf("%w: %w", errBusy, err))
		return nil, nil, false
	}
	return buf, func() { l.deciding.Leave(ticket); l.free(b) }, true
}

// refuse answers a request the limiter will not pass on. Its body is not
// read to its end, so the connection cannot carry another request.
func (l *limiter) refuse(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Connection", "close")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(l.RetryAfter.Seconds())))
	}
	http.Error(w, err.Error(), status)
}
