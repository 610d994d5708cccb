package server

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// TestHelloBoundedConn checks that a ClientHello declaring more than
// MaxClientHelloBytes is refused at its first nine bytes, whatever reads
// split them into, and that anything else passes unchanged.
func TestHelloBoundedConn(t *testing.T) {
	hello := func(length int) []byte { // a record header, then a ClientHello's handshake header
		return []byte{22, 3, 1, 0x40, 0, 1, byte(length >> 16), byte(length >> 8), byte(length), 'x'}
	}
	for _, tt := range []struct {
		name    string
		sent    []byte
		reads   []int // the sizes of the reads of the receiver
		wantErr error
	}{
		{"a ClientHello of 64 KiB", hello(64 << 10), []int{512}, errHelloTooLarge},
		{"a ClientHello of 64 KiB read byte by byte", hello(64 << 10), []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, errHelloTooLarge},
		{"a ClientHello of MaxClientHelloBytes", hello(MaxClientHelloBytes), []int{512}, nil},
		{"a ClientHello of 2 KiB", hello(2 << 10), []int{3, 512}, nil},
		{"not TLS", []byte("GET / HTTP/1.1\r\n\r\n"), []int{512}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			go func() {
				_, _ = client.Write(tt.sent)
				_ = client.Close()
			}()
			conn := &helloBoundedConn{Conn: server}
			var got []byte
			var err error
			for _, size := range tt.reads {
				var n int
				buf := make([]byte, size)
				n, err = conn.Read(buf)
				got = append(got, buf[:n]...)
				if err != nil {
					break
				}
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("read: %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && !strings.HasPrefix(string(tt.sent), string(got)) {
				t.Errorf("read %q, want a prefix of %q", got, tt.sent)
			}
		})
	}
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
