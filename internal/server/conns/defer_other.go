//go:build !linux

package conns

import (
	"net"
	"syscall"
	"time"
)

// deferAccept is Linux's only: elsewhere the first-byte wait before a handshake holds a silent connection.
func deferAccept(time.Duration) func(network, address string, c syscall.RawConn) error { return nil }

// hasUnreadBytes cannot tell without Linux's MSG_PEEK, and answers yes: a connection is taken for
// a silent one only once its first read waited, and a served one never for one doing no work.
func hasUnreadBytes(net.Conn) bool { return true }
