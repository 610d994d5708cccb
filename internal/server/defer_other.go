//go:build !linux

package server

import (
	"net"
	"syscall"
)

// deferAccept is Linux's only: elsewhere a connection that sends nothing
// is accepted, and the first-byte wait before its handshake holds it.
var deferAccept func(network, address string, c syscall.RawConn) error

// sentFirstByte cannot tell without Linux's MSG_PEEK, and says so: a
// connection is taken for a silent one only once its first read waited.
func sentFirstByte(net.Conn) bool { return true }
