//go:build !linux

package server

import "syscall"

// deferAccept is Linux's only: elsewhere a connection that sends nothing
// is accepted, and the first-byte wait before its handshake holds it.
var deferAccept func(network, address string, c syscall.RawConn) error
