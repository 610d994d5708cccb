//go:build !linux

package server

import (
	"net"
	"syscall"
)

// deferAccept is Linux's only: elsewhere a connection that sends nothing
// is accepted, and the first-byte wait before its handshake holds it.
var deferAccept func(network, address string, c syscall.RawConn) error

// hasUnreadBytes cannot tell without Linux's MSG_PEEK, and answers yes: a connection is taken for
// a silent one only once its first read waited, and a served one never for one doing no work.
func hasUnreadBytes(net.Conn) bool { return true }
