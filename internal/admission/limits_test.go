package admission

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flyteorg/flyte-mpi-webhook/internal/fair"
)

// limited serves a request as Handler.ServeHTTP serves a review: behind
// l.read, holding the body's bytes and its place until h has answered.
func limited(l *limiter, h readingHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, done, ok := l.read(w, r)
		if !ok {
			return
		}
		defer done()
		h.serve(w, r, body)
	})
}

// readingHandler stands for the review: given the body l.read read, it
// waits for gate, if any, then answers 200 with the body's length.
type readingHandler struct {
	entered chan string // receives the client's address once the body is read, when gate is set
	gate    chan struct{}
}

func (h readingHandler) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	if h.gate != nil {
		h.entered <- fair.ClientAddress(r.RemoteAddr)
		<-h.gate
	}
	fmt.Fprint(w, len(body))
}

// reply is what a client got: the status, the Retry-After header, and
// the body's first line.
type reply struct {
	Status     int
	RetryAfter string
	Body       string
}

// send posts body; a request that gets no reply is answered status 0 with the error.
func send(url string, body io.Reader, contentLength int64) reply {
	return sendFrom("", url, body, contentLength)
}

// sendFrom posts body from the loopback address from, another client
// address than the default 127.0.0.1.
func sendFrom(from, url string, body io.Reader, contentLength int64) reply {
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		return reply{Body: err.Error()}
	}
	req.ContentLength = contentLength
	client := http.DefaultClient
	if from != "" {
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		client = &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{Body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	first, _, _ := strings.Cut(string(b), "\n")
	return reply{resp.StatusCode, resp.Header.Get("Retry-After"), first}
}

// sendHeaders sends a request's headers, declaring a body of contentLength
// bytes, and no body.
func sendHeaders(t *testing.T, address string, contentLength int64) reply {
	t.Helper()
	conn, err := net.Dial("tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", address, contentLength); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	first, _, _ := strings.Cut(string(b), "\n")
	return reply{resp.StatusCode, resp.Header.Get("Retry-After"), first}
}

// waitUntil polls the limiter's counts until cond holds.
func waitUntil(t *testing.T, l *limiter, what string, cond func(*limiter) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			return cond(l), nil
		})
	if err != nil {
		t.Fatalf("waiting until %s: %v", what, err)
	}
}

func idle(l *limiter) bool {
	running, waiting := l.deciding.Holders()
	return l.bytes == 0 && len(l.arriving) == 0 && running == 0 && waiting == 0
}

func TestLimitBodySize(t *testing.T) {
	l := newLimiter(DefaultLimits())
	srv := httptest.NewServer(limited(l, readingHandler{}))
	t.Cleanup(srv.Close) // after the bodies still arriving are closed
	maxBody := DefaultLimits().MaxBodyBytes
	atLimit := bytes.Repeat([]byte("x"), int(maxBody))
	for _, tt := range []struct {
		name          string
		body          io.Reader
		contentLength int64
		want          reply
	}{
		{"a small body", strings.NewReader("{}"), 2, reply{Status: 200, Body: "2"}},
		{"a body at the limit", bytes.NewReader(atLimit), maxBody, reply{Status: 200, Body: strconv.FormatInt(maxBody, 10)}},
		{"a Content-Length above the limit, refused unread", nil, maxBody + 1,
			reply{Status: 413, Body: fmt.Sprintf("the body is %d bytes, more than the %d served", maxBody+1, maxBody)}},
		{"a body of unknown length, refused unread", strings.NewReader("{}"), -1,
			reply{Status: 411, Body: "a Content-Length is required: the API server always sends one"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got reply
			if tt.body == nil {
				got = sendHeaders(t, srv.Listener.Addr().String(), tt.contentLength)
			} else {
				got = send(srv.URL, tt.body, tt.contentLength)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			waitUntil(t, l, "the request is no longer counted", idle)
		})
	}
}

// TestLimitBodyFailsMidway checks that a body whose read fails is answered
// 400 unread by the review, its connection closed, and its bytes given back.
func TestLimitBodyFailsMidway(t *testing.T) {
	h := newHandler()
	req := hostileInput{body: []byte(`{"kind":"AdmissionReview"}`)}.request()
	req.Body = io.NopCloser(io.MultiReader(strings.NewReader(`{"kind"`), iotest.ErrReader(errors.New("connection reset"))))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	got := fmt.Sprint(rec.Code, " ", rec.Header().Get("Connection"), " ", rec.Body.String())
	if want := "400 close reading the body: connection reset\n"; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
	waitUntil(t, h.limiter, "the request is no longer counted", idle)
}

// TestLimitServesOnlyPOST checks that a request the API server never sends is refused before any body is read.
func TestLimitServesOnlyPOST(t *testing.T) {
	srv := httptest.NewServer(limited(newLimiter(DefaultLimits()), readingHandler{}))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("status %d, Allow %q; want 405 and POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// TestLimitDecidingSharedByAddress fills the places for deciding from one
// client address, with more of its requests waiting, and checks that one
// from another address is let in before the flood's waiters, and that
// every request is answered. synctest's Wait returns once each request
// waits where it must.
func TestLimitDecidingSharedByAddress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(DefaultLimits())
		l.deciding = fair.NewGate(2)
		h := readingHandler{entered: make(chan string, 8), gate: make(chan struct{})}
		var answers []*httptest.ResponseRecorder
		send := func(from string) {
			rec, req := httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
			req.RemoteAddr = from + ":40000"
			answers = append(answers, rec)
			go limited(l, h).ServeHTTP(rec, req)
			synctest.Wait() // it is decided, or waits behind those before it
		}
		for range 5 { // two decided, three waiting
			send("127.0.0.1")
		}
		<-h.entered
		<-h.entered
		send("127.0.0.2")

		// One place frees: the other address's turn comes first, though the flood's waited longer.
		h.gate <- struct{}{}
		synctest.Wait()
		if next := <-h.entered; next != "127.0.0.2" {
			t.Errorf("once a place freed, %s was let in; want 127.0.0.2, whose turn comes before the flood's next", next)
		}
		close(h.gate)
		synctest.Wait()
		for i, rec := range answers {
			if rec.Code != http.StatusOK {
				t.Errorf("request %d was answered %d %q, want 200", i, rec.Code, rec.Body)
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if !idle(l) {
			t.Error("every request answered, the limiter still counts some")
		}
	})
}

// trickle starts a request whose body arrives as the test writes it, and
// returns the writer and where the reply will arrive.
func trickle(t *testing.T, url string, declared int64) (*io.PipeWriter, <-chan reply) {
	t.Helper()
	r, w := io.Pipe()
	t.Cleanup(func() { w.Close() })
	got := make(chan reply, 1)
	go func() { got <- send(url, r, declared) }()
	return w, got
}

func write(t *testing.T, w io.Writer, n int) {
	t.Helper()
	if _, err := w.Write(bytes.Repeat([]byte(" "), n)); err != nil {
		t.Fatal(err)
	}
}

// TestLimitSlowBodies fills the budget for body bytes with bodies that
// arrive slowly, and checks that a large body waits for the budget, unread,
// that a small body still gets through, aborting the oldest slow body, and
// that the bytes it frees go to the body that waits.
func TestLimitSlowBodies(t *testing.T) {
	l := newLimiter(DefaultLimits())
	l.MaxBufferedBytes, l.SmallRequestReserve, l.SmallRequestBytes = 64<<10, 16<<10, 8<<10
	srv := httptest.NewServer(limited(l, readingHandler{}))
	t.Cleanup(srv.Close) // after the bodies still arriving are closed

	// A large body takes the budget for large bodies whole, and sends part of it.
	first, firstAnswer := trickle(t, srv.URL, 40<<10)
	write(t, first, 20<<10)
	waitUntil(t, l, "the first slow body holds its bytes of the budget", func(l *limiter) bool { return l.bytes == 40<<10 })

	// A second large body waits for the budget, unread.
	second, secondAnswer := trickle(t, srv.URL, 16<<10)
	go func() { _, _ = second.Write(bytes.Repeat([]byte(" "), 16<<10)) }()
	// Three small slow bodies fill the rest.
	var small []*io.PipeWriter
	for range 3 {
		w, _ := trickle(t, srv.URL, 8<<10)
		write(t, w, 7<<10)
		small = append(small, w)
	}
	waitUntil(t, l, "the slow bodies hold all the budget", func(l *limiter) bool { return l.bytes == 64<<10 })

	// The next small body does not fit: it aborts the oldest slow body, and is answered.
	if got := send(srv.URL, strings.NewReader(strings.Repeat(" ", 4<<10)), 4<<10); got.Status != 200 {
		t.Errorf("a small body when the budget is spent: %+v, want 200", got)
	}
	if diff := cmp.Diff(reply{Status: 503, RetryAfter: "1", Body: errAborted.Error()}, <-firstAnswer); diff != "" {
		t.Errorf("the oldest slow body (-want +got):\n%s", diff)
	}
	// The bytes the small body gave back go to the large body that waits.
	if diff := cmp.Diff(reply{Status: 200, Body: strconv.Itoa(16 << 10)}, <-secondAnswer); diff != "" {
		t.Errorf("the large body that waited (-want +got):\n%s", diff)
	}
	for _, w := range small {
		w.CloseWithError(io.ErrUnexpectedEOF)
	}
	waitUntil(t, l, "no request is counted", idle)
}

// TestLimitNoBudgetWhileAnswering fills the budget with a body being answered,
// and checks what a body that finds none gets: a large one waits and is
// answered 408 once its deadline passes; a small one, with no body
// arriving to abort, is refused at once.
func TestLimitNoBudgetWhileAnswering(t *testing.T) {
	for _, tt := range []struct {
		name                       string
		held, sent                 int
		maxBytes, reserve, smallAt int64
		want                       reply
	}{
		{"a large body", 40 << 10, 16 << 10, 64 << 10, 16 << 10, 8 << 10, reply{Status: 408, Body: "the body did not arrive within 100ms"}},
		{"a small body", 12 << 10, 8 << 10, 16 << 10, 0, 16 << 10, reply{Status: 503, RetryAfter: "1", Body: errBusy.Error()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			limits := DefaultLimits()
			limits.MaxBufferedBytes, limits.SmallRequestReserve, limits.SmallRequestBytes, limits.ReadTimeout = tt.maxBytes, tt.reserve, tt.smallAt, 100*time.Millisecond
			l := newLimiter(limits)
			h := readingHandler{entered: make(chan string, 8), gate: make(chan struct{})}
			srv := httptest.NewServer(limited(l, h))
			t.Cleanup(srv.Close)
			answered := make(chan reply, 1)
			go func() { answered <- send(srv.URL, bytes.NewReader(make([]byte, tt.held)), int64(tt.held)) }()
			<-h.entered
			if diff := cmp.Diff(tt.want, send(srv.URL, bytes.NewReader(make([]byte, tt.sent)), int64(tt.sent))); diff != "" {
				t.Errorf("a body the budget cannot hold (-want +got):\n%s", diff)
			}
			close(h.gate)
			if got := <-answered; got.Status != 200 {
				t.Errorf("the body being answered: %+v, want 200", got)
			}
			waitUntil(t, l, "no request is counted", idle)
		})
	}
}
