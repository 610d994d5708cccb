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
)

// The bounds on what a client can make the webhook hold: docs/RELIABILITY.md
// has why each is what it is. The API server sends a review's headers and
// body at once and gives up after timeoutSeconds (5 in config/webhook, 30
// at most): what takes longer is not the API server's.
const (
	// MaxBodyBytes bounds a request's body: the API server refuses bodies
	// above 3 MiB, and etcd stores no object above 1.5 MiB. Above, 413 from
	// the Content-Length, unread; without one, 411.
	MaxBodyBytes = 3 << 20

	// MaxHeaderBytes bounds a request's headers, as nginx's default does.
	MaxHeaderBytes = 32 << 10

	// ReadHeaderTimeout bounds the time a request's headers may take to arrive.
	ReadHeaderTimeout = 5 * time.Second

	// ReadTimeout bounds a whole request from its first byte: a deadline on
	// the connection, which a trickle cannot push back.
	ReadTimeout = 10 * time.Second

	// WriteTimeout bounds the time from a request's headers to the end of its answer.
	WriteTimeout = ReadTimeout + 5*time.Second

	// IdleTimeout closes a keep-alive connection that carries no request,
	// as controller-runtime's server does.
	IdleTimeout = 90 * time.Second

	// MaxInFlight caps the requests whose body has arrived, being decided or
	// waiting to be; beyond, 503 with Retry-After, which the API server's
	// client honours. A body still arriving is bounded by MaxBufferedBytes.
	MaxInFlight = 64

	// MaxDeciding caps the requests being decided at once, shared among
	// client addresses (gate): twice the Deployment's cores.
	MaxDeciding = 4

	// DecideWait bounds how long a request waits for its turn: the API
	// server's timeoutSeconds.
	DecideWait = 5 * time.Second

	// MaxBufferedBytes caps the Content-Length of the bodies held at once,
	// arriving or being answered: the byte budget, which holds a review of
	// MaxBodyBytes beside the reserve.
	MaxBufferedBytes = 6 << 20

	// SmallRequestBytes is the largest body counted as small: a Flyte
	// MPIJob's review is a few KiB.
	SmallRequestBytes = 256 << 10

	// SmallRequestReserve is the part of the budget only small bodies may
	// use, so that large ones, fast or slow, leave some to the reviews the
	// API server usually sends.
	SmallRequestReserve = 2 << 20

	// RetryAfterSeconds is the Retry-After of a 503.
	RetryAfterSeconds = 1
)

var (
	// errBusy refuses a request when MaxInFlight, or the budget of MaxBufferedBytes, leaves it no place.
	errBusy = errors.New("the webhook is busy: too many requests in flight, or too many request bytes held")
	// errAborted refuses a request whose body was still arriving when a newer one needed its bytes of the budget.
	errAborted = errors.New("the request body arrived too slowly while the webhook was short of memory")
	// errTooSlow refuses a request whose body has not arrived, or found the budget to hold it, within ReadTimeout.
	errTooSlow = fmt.Errorf("the body did not arrive within %s", ReadTimeout)
)

// limiter holds what MaxInFlight, MaxDeciding and MaxBufferedBytes bound.
type limiter struct {
	// deciding holds the requests being decided, and those waiting their turn.
	deciding                      *gate
	decideWait                    time.Duration
	maxBytes, reserve, smallBytes int64
	// wait is how long a large body waits for the budget to hold it: its request's ReadTimeout.
	wait time.Duration

	mu    sync.Mutex
	bytes int64 // the lengths of the bodies arriving or being answered
	// arriving are the bodies still being read, oldest first.
	arriving []*body
	// freed is closed, and replaced, when bytes are given back to the budget.
	freed chan struct{}
}

func newLimiter() *limiter {
	return &limiter{deciding: &gate{max: MaxDeciding, maxWaiting: MaxInFlight - MaxDeciding}, decideWait: DecideWait,
		maxBytes: MaxBufferedBytes, reserve: SmallRequestReserve, smallBytes: SmallRequestBytes, wait: ReadTimeout,
		freed: make(chan struct{})}
}

// body is one request's body, from its length taken from the budget to its answer.
type body struct {
	length int64
	// abort stops a read of the body under way (a read deadline in the past).
	abort   func()
	aborted bool
}

// claim takes b's length from the budget before its first byte is read. A
// small body that the budget cannot hold aborts the bodies still arriving,
// oldest first: the API server sends a body at once, so those are slow
// clients'. A large one may not use the reserve, and waits, unread, for the
// budget to hold it until its deadline: refused, its client would connect
// again at once, which costs more than waiting.
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

// arrived marks b read, whole or not: it can no longer be aborted, and
// errAborted says it was.
func (l *limiter) arrived(b *body) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.aborted {
		return errAborted
	}
	l.arriving = slices.DeleteFunc(l.arriving, func(a *body) bool { return a == b })
	return nil
}

// free gives b's length back to the budget: it is answered, or refused.
func (l *limiter) free(b *body) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.aborted {
		return // its bytes went to the body that aborted it
	}
	l.arriving = slices.DeleteFunc(l.arriving, func(a *body) bool { return a == b })
	l.bytes -= b.length
	close(l.freed) // wakes the large bodies waiting for the budget
	l.freed = make(chan struct{})
}

// limit wraps next: it serves only a POST whose Content-Length is within
// MaxBodyBytes, reads the body once the budget holds it, and
// passes it on whole; the handler never waits for a client.
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
		// Setting a connection's read deadline is safe from any goroutine,
		// and wakes the read below; the limiter aborts only a body still arriving.
		b := &body{length: r.ContentLength, abort: func() { _ = rc.SetReadDeadline(time.Unix(1, 0)) }}
		if err := l.claim(b); err != nil {
			refuse(w, refusal(err), err)
			return
		}
		defer l.free(b)
		// The budget holds the Content-Length, so the buffer may too.
		buf := make([]byte, b.length)
		_, err := io.ReadFull(r.Body, buf)
		switch {
		case l.arrived(b) != nil:
			refuse(w, refusal(errAborted), errAborted)
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			refuse(w, refusal(errTooSlow), errTooSlow)
			return
		case err != nil:
			refuse(w, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err))
			return
		}
		ticket, err := l.deciding.enter(clientAddress(r.RemoteAddr), time.Now().Add(l.decideWait))
		if err != nil {
			refuse(w, http.StatusServiceUnavailable, fmt.Errorf("%w: %w", errBusy, err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(buf))
		answer := &heldAnswer{ResponseWriter: w, status: http.StatusOK}
		func() {
			defer l.deciding.leave(ticket) // a panic, which net/http recovers, frees the place too
			next.ServeHTTP(answer, r)
		}()
		w.WriteHeader(answer.status)
		_, _ = w.Write(answer.body.Bytes())
	})
}

// heldAnswer holds a handler's answer until it returns, so that writing it
// to a client slow to read holds no place among MaxDeciding. Its header is
// the ResponseWriter's own, sent with the status once it is written.
type heldAnswer struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (a *heldAnswer) WriteHeader(status int) { a.status = status }

func (a *heldAnswer) Write(p []byte) (int, error) { return a.body.Write(p) }

// refusal is the status of a refusal of the limiter's: 408 for a body that
// did not arrive, or find the budget to hold it, in time; 503 when there
// was no place.
func refusal(err error) int {
	if errors.Is(err, errTooSlow) {
		return http.StatusRequestTimeout
	}
	return http.StatusServiceUnavailable
}

// refuse answers a request the limiter will not pass on. The body is not
// read to its end, so the connection cannot carry another request; a 503
// says when to try again, which the API server's client honours.
func refuse(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Connection", "close")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	http.Error(w, err.Error(), status)
}
