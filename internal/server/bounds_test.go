package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// TestHelloTooLarge checks that a ClientHello declaring more than
// MaxClientHelloBytes is refused at its first nine bytes, and anything else
// is not; and that what handshake read of a connection is read again.
func TestHelloTooLarge(t *testing.T) {
	hello := func(length int) []byte { // a record header, then a ClientHello's handshake header
		return []byte{22, 3, 1, 0x40, 0, 1, byte(length >> 16), byte(length >> 8), byte(length)}
	}
	for _, tt := range []struct {
		name    string
		headers []byte
		want    bool
	}{
		{"a ClientHello of 64 KiB", hello(64 << 10), true},
		{"a ClientHello of MaxClientHelloBytes + 1", hello(MaxClientHelloBytes + 1), true},
		{"a ClientHello of MaxClientHelloBytes", hello(MaxClientHelloBytes), false},
		{"a ClientHello of 2 KiB", hello(2 << 10), false},
		{"not TLS", []byte("GET / HTT"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := helloTooLarge(tt.headers); got != tt.want {
				t.Fatalf("helloTooLarge: %t, want %t", got, tt.want)
			}
		})
	}
	t.Run("read again", func(t *testing.T) {
		client, server := net.Pipe()
		go func() {
			_, _ = client.Write([]byte("ld"))
			_ = client.Close()
		}()
		got, err := io.ReadAll(&fairConn{Conn: server, first: []byte("hello, wor")})
		if err != nil || string(got) != "hello, world" {
			t.Fatalf("read %q, %v; want %q", got, err, "hello, world")
		}
	})
}

// TestProbeServerBoundsHeaders checks that the probe and metrics ports refuse
// headers above MaxProbeHeaderBytes and still answer a probe.
func TestProbeServerBoundsHeaders(t *testing.T) {
	l, err := listen("127.0.0.1:0", MaxProbeConns)
	if err != nil {
		t.Fatal(err)
	}
	srv := probeServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }), logr.Discard())
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, tt := range []struct {
		name   string
		header int
		want   int
	}{
		{"a probe", 100, http.StatusOK},
		{"a header of 64 KiB", 64 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			go fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", strings.Repeat("a", tt.header))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}
