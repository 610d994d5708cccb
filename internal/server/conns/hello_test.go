package conns

import (
	"io"
	"net"
	"testing"
)

// TestHelloTooLarge checks that a ClientHello declaring more than
// testLimits.MaxClientHelloBytes is refused at its first nine bytes, and anything else
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
		{"a ClientHello of testLimits.MaxClientHelloBytes + 1", hello(testLimits.MaxClientHelloBytes + 1), true},
		{"a ClientHello of testLimits.MaxClientHelloBytes", hello(testLimits.MaxClientHelloBytes), false},
		{"a ClientHello of 2 KiB", hello(2 << 10), false},
		{"not TLS", []byte("GET / HTT"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := helloTooLarge(tt.headers, testLimits.MaxClientHelloBytes); got != tt.want {
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
		got, err := io.ReadAll(&connection{Conn: server, first: []byte("hello, wor")})
		if err != nil || string(got) != "hello, world" {
			t.Fatalf("read %q, %v; want %q", got, err, "hello, world")
		}
	})
}
