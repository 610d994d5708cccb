package server

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// The bounds on what a client can make the webhook hold. The API server sends
// a review's headers and body at once, over a cluster network, and gives up
// after the webhook configuration's timeoutSeconds (5 in config/webhook, 30
// at most); whatever takes longer comes from a client that is not the API
// server, or from one that has stopped listening.
const (
	// MaxRequestBytes bounds a request body. An MPIJob is a custom resource,
	// which the API server stores in etcd as JSON, and etcd refuses a write
	// above its --max-request-bytes (1.5 MiB by default); the API server
	// itself refuses request bodies above 3 MiB (MaxRequestBodyBytes, twice
	// etcd's limit). A CREATE review holds one object and an envelope of a
	// few KiB, so 3 MiB holds every MPIJob that can be stored, twice over;
	// a larger body is refused with 413 from its Content-Length, unread, or
	// cut at the limit when it has none.
	MaxRequestBytes = 3 << 20

	// MaxHeaderBytes bounds a request's headers. The API server sends a
	// handful (Content-Type, Accept, User-Agent, at most a bearer token);
	// 32 KiB is what nginx allows by default (4 buffers of 8 KiB).
	MaxHeaderBytes = 32 << 10

	// ReadHeaderTimeout bounds the time a request's headers may take to arrive.
	ReadHeaderTimeout = 5 * time.Second

	// ReadTimeout bounds the time a whole request, headers and body, may take
	// to arrive, from its first byte: a deadline on the connection, which a
	// trickle of bytes cannot push back. It is the API server's default
	// timeoutSeconds. When memory is short, a slow small body is cut sooner,
	// and a large one waits, unread, up to this long (see MaxBufferedBytes).
	ReadTimeout = 10 * time.Second

	// WriteTimeout bounds the time from a request's headers to the end of
	// its answer: the body, the decision and writing the response.
	WriteTimeout = ReadTimeout + 5*time.Second

	// IdleTimeout closes a keep-alive connection that carries no request,
	// as controller-runtime's server does (net/http's client keeps idle
	// connections for as long).
	IdleTimeout = 90 * time.Second

	// MaxInFlight caps the requests whose body has arrived and that are
	// being answered; one more is answered 503 at once, with Retry-After,
	// which the API server's client honours by retrying. A body still
	// arriving is not counted here, so slow clients cannot take the API
	// server's turn; what they hold is bounded by MaxBufferedBytes.
	MaxInFlight = 64

	// MaxBufferedBytes caps the request body bytes held in memory at once,
	// over every request, whether still arriving or being answered. A small
	// body's bytes are counted as they arrive; a large body's Content-Length
	// is counted before its first byte (see countedBody.Read). Either way the
	// memory is allocated only as the bytes arrive, never from a declared
	// Content-Length, so a client holds what it has sent. A body costs up to
	// about four times its size while it is read (io.ReadAll's growing chunks
	// and its final copy) and decoded, and the garbage waits for the
	// collector: 6 MiB keeps the webhook's resident memory under 100 MiB
	// (about 37 MiB idle, 25 MiB of it the binary's pages) within the
	// Deployment's 128 MiB limit, and still holds a review of
	// MaxRequestBytes beside the reserve.
	MaxBufferedBytes = 6 << 20

	// SmallRequestBytes is the largest body counted as small. A Flyte
	// MPIJob's review is a few KiB; even one with large pod templates is far
	// below this.
	SmallRequestBytes = 256 << 10

	// SmallRequestReserve is the part of MaxBufferedBytes that only small
	// bodies may use, so that large ones, arriving fast or slowly, cannot
	// leave no room for the reviews the API server usually sends. A small
	// body short of room cuts the oldest bodies still arriving; a large one
	// waits (see limiter.take).
	SmallRequestReserve = 2 << 20

	// RetryAfterSeconds is the Retry-After of a 503: the API server's
	// client (client-go's rest client) retries a 429 or 5xx that carries
	// one, within the webhook's timeout.
	RetryAfterSeconds = 1
)

var (
	// errBusy refuses a request when MaxInFlight or MaxBufferedBytes leave it no room.
	errBusy = errors.New("the webhook is busy: too many requests in flight, or too many request bytes held")
	// errCut refuses a request whose body was still arriving when a newer one needed its room.
	errCut = errors.New("the request body arrived too slowly while the webhook was short of memory")
	// errTooSlow refuses a request whose body has not arrived within ReadTimeout.
	errTooSlow = fmt.Errorf("the body did not arrive within %s", ReadTimeout)
)

// readChunk is the most a body read takes room for before it reads: a
// TLS record holds at most 16 KiB.
const readChunk = 16 << 10

// limiter holds the counts MaxInFlight and MaxBufferedBytes bound.
type limiter struct {
	maxInFlight                   int
	maxBytes, reserve, smallBytes int64
	bodyTimeout                   time.Duration

	mu       sync.Mutex
	inFlight int
	bytes    int64
	// arriving holds the requests whose body is still arriving, oldest first.
	arriving list.List
	// freed is closed, and replaced, when room frees for a body that waits.
	freed   chan struct{}
	waiting int
}

func newLimiter() *limiter {
	return &limiter{
		maxInFlight: MaxInFlight, maxBytes: MaxBufferedBytes, reserve: SmallRequestReserve,
		smallBytes: SmallRequestBytes, bodyTimeout: ReadTimeout, freed: make(chan struct{}),
	}
}

// tracked is one request the limiter counts.
type tracked struct {
	deadline time.Time
	declared int64 // Content-Length, or -1
	held     int64 // body bytes counted in limiter.bytes
	inFlight bool
	arriving *list.Element
	// err is why the limiter refused the request; cut stops a read of its
	// body that is under way (a read deadline in the past).
	err error
	cut func()
}

// small tells whether t's body, with more bytes, is still a small one.
func (l *limiter) small(t *tracked, more int64) bool {
	return t.declared <= l.smallBytes && t.held+more <= l.smallBytes
}

// begin starts counting a request whose body is about to arrive.
func (l *limiter) begin(declared int64, cut func()) *tracked {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := &tracked{deadline: time.Now().Add(l.bodyTimeout), declared: declared, cut: cut}
	t.arriving = l.arriving.PushBack(t)
	return t
}

// take counts up to n more bytes of t's body, before they are read, and
// returns how many it counted. A small body takes the room at once,
// cutting, when there is none, the bodies still arriving that started before
// it, oldest first: the API server sends a body at once, so those are slow
// clients'. It is refused when that is not enough. A large body may not use
// the reserve; it takes what room there is, all n when its length is known,
// and when there is none it waits, unread, until room frees or its deadline
// passes: cutting it would only have its client connect again, which costs
// more than waiting.
func (l *limiter) take(t *tracked, n int64) (int64, error) {
	var expired <-chan time.Time
	for {
		l.mu.Lock()
		if t.err != nil {
			l.mu.Unlock()
			return 0, t.err
		}
		small := l.small(t, n)
		for small && l.bytes+n > l.maxBytes {
			// The oldest body still arriving goes first; t itself, when it
			// is the oldest or no longer arriving, is refused.
			oldest := l.arriving.Front()
			if oldest == nil || oldest.Value == t {
				t.err = errBusy
				l.mu.Unlock()
				return 0, t.err
			}
			victim := oldest.Value.(*tracked)
			victim.err = errCut
			l.stopArriving(victim)
			l.bytes -= victim.held
			victim.held = 0
			victim.cut()
			l.wakeLocked() // the victim may be waiting
		}
		granted := n
		if !small {
			granted = min(n, l.maxBytes-l.reserve-l.bytes)
			if t.declared >= 0 && granted < n {
				granted = 0
			}
		}
		if granted > 0 {
			l.bytes += granted
			t.held += granted
			l.mu.Unlock()
			return granted, nil
		}
		freed := l.freed
		l.waiting++
		l.mu.Unlock()
		if expired == nil {
			timer := time.NewTimer(time.Until(t.deadline))
			defer timer.Stop()
			expired = timer.C
		}
		select {
		case <-freed:
			l.mu.Lock()
			l.waiting--
			l.mu.Unlock()
		case <-expired:
			l.mu.Lock()
			l.waiting--
			t.err = errTooSlow
			l.mu.Unlock()
			return 0, t.err
		}
	}
}

// give returns n bytes t took but did not read.
func (l *limiter) give(t *tracked, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t.held -= n
	l.releaseLocked(n)
}

// releaseLocked uncounts n bytes, and wakes the bodies waiting for room if
// they may have some now.
func (l *limiter) releaseLocked(n int64) {
	l.bytes -= n
	if n > 0 && l.bytes < l.maxBytes-l.reserve {
		l.wakeLocked()
	}
}

// wakeLocked wakes the bodies waiting for room.
func (l *limiter) wakeLocked() {
	if l.waiting > 0 {
		close(l.freed)
		l.freed = make(chan struct{})
	}
}

// arrived marks t's body complete: it is in flight from now on, if there is room.
func (l *limiter) arrived(t *tracked) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.err != nil || t.inFlight {
		return t.err // refused, or a read past the end of a body already counted
	}
	l.stopArriving(t)
	if l.inFlight >= l.maxInFlight {
		t.err = errBusy
		return t.err
	}
	l.inFlight++
	t.inFlight = true
	return nil
}

// end stops counting t: its handler has returned.
func (l *limiter) end(t *tracked) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopArriving(t)
	l.releaseLocked(t.held)
	t.held = 0
	if t.inFlight {
		l.inFlight--
		t.inFlight = false
	}
}

func (l *limiter) stopArriving(t *tracked) {
	if t.arriving != nil {
		l.arriving.Remove(t.arriving)
		t.arriving = nil
	}
}

// limit wraps next: it refuses a body above MaxRequestBytes, counts the
// body's bytes as next reads them, and the request as in flight once the
// body is complete, and answers in next's place when the limiter refuses the
// request or the body's deadline passes.
func (l *limiter) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "only POST is served", http.StatusMethodNotAllowed)
			return
		}
		if r.ContentLength > MaxRequestBytes {
			w.Header().Set("Connection", "close")
			http.Error(w, fmt.Sprintf("the body is %d bytes, more than the %d served", r.ContentLength, MaxRequestBytes),
				http.StatusRequestEntityTooLarge)
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		// Setting a connection's read deadline is safe from any goroutine,
		// and wakes the handler's blocked read; the limiter calls cut only
		// while the body is arriving.
		t := l.begin(r.ContentLength, func() { _ = rc.SetReadDeadline(time.Unix(1, 0)) })
		defer l.end(t)
		body := &countedBody{body: http.MaxBytesReader(w, r.Body, MaxRequestBytes), limiter: l, tracked: t}
		r.Body = body
		next.ServeHTTP(&refusingWriter{ResponseWriter: w, body: body}, r)
	})
}

// countedBody is a request body whose bytes the limiter counts as they arrive.
type countedBody struct {
	body    io.ReadCloser
	limiter *limiter
	tracked *tracked
	read    int64
	// room is what the limiter counts for this body beyond what it has read.
	room int64
	// refusal is the status the request is answered with instead of the
	// handler's, once reading the body failed because of a bound.
	refusal int
	err     error
}

func (b *countedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err // refused, or the body has ended: counted once
	}
	if len(p) == 0 {
		return b.body.Read(p)
	}
	declared, limit := b.tracked.declared, int64(1) // only the EOF is left to read
	if declared < 0 || b.read < declared {
		limit = b.room
	}
	if limit == 0 {
		want := int64(min(len(p), readChunk))
		switch {
		case declared > b.limiter.smallBytes:
			// A large body of known length takes room for all of it before
			// its first byte: two large bodies that each took part of the
			// room would wait for each other until their deadlines. Its
			// memory still grows only as its bytes arrive.
			want = max(declared-b.read, 1)
		case declared >= 0:
			// Never more than the Content-Length still to come, so that a
			// small body counts as small.
			want = min(want, declared-b.read)
		}
		granted, err := b.limiter.take(b.tracked, want)
		if err != nil {
			return 0, b.refuse(err)
		}
		b.room, limit = granted, granted
	}
	n, err := b.body.Read(p[:min(int64(len(p)), limit)])
	b.read += int64(n)
	b.room -= int64(n)
	if declared <= b.limiter.smallBytes {
		b.limiter.give(b.tracked, b.room) // a small body takes room read by read
		b.room = 0
	}
	switch {
	case err == io.EOF:
		if e := b.limiter.arrived(b.tracked); e != nil {
			return 0, b.refuse(e)
		}
		b.err = io.EOF
	case errors.Is(err, os.ErrDeadlineExceeded):
		if e := b.limiter.refusal(b.tracked); e != nil {
			return 0, b.refuse(e) // cut while reading
		}
		return n, b.refuse(fmt.Errorf("%w: %w", errTooSlow, err))
	case err != nil:
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			b.refusal, b.err = http.StatusRequestEntityTooLarge, fmt.Errorf("the body is more than the %d bytes served: %w", MaxRequestBytes, err)
			return n, b.err
		}
	}
	return n, err
}

func (b *countedBody) Close() error { return b.body.Close() }

// refuse records why the body could not be read, and the status that says it.
func (b *countedBody) refuse(err error) error {
	b.refusal, b.err = http.StatusServiceUnavailable, err
	if errors.Is(err, errTooSlow) {
		b.refusal = http.StatusRequestTimeout
	}
	return err
}

// refusal returns why the limiter refused t, if it did.
func (l *limiter) refusal(t *tracked) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return t.err
}

// refusingWriter answers with the body's refusal in place of what the
// handler writes, once reading the body failed because of a bound: the
// handler sees only a failed read, which it would answer with a 400.
type refusingWriter struct {
	http.ResponseWriter
	body    *countedBody
	refused bool
}

func (w *refusingWriter) WriteHeader(status int) {
	if w.refused {
		return
	}
	if w.body.refusal == 0 {
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.refused = true
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	// The body was not read to its end, so the connection cannot carry another request.
	h.Set("Connection", "close")
	if w.body.refusal == http.StatusServiceUnavailable {
		h.Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	w.ResponseWriter.WriteHeader(w.body.refusal)
	_, _ = io.WriteString(w.ResponseWriter, w.body.err.Error()+"\n")
}

func (w *refusingWriter) Write(p []byte) (int, error) {
	if !w.refused && w.body.refusal != 0 {
		w.WriteHeader(http.StatusOK) // replaced by the refusal
	}
	if w.refused {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *refusingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
