//go:build linux

package server

import (
	"cmp"
	"net"
	"syscall"
)

// deferAccept has the kernel hand over a connection only once its client has sent a byte, or
// HandshakeTimeout after (TCP_DEFER_ACCEPT, nginx's listen ... deferred): until then it holds no descriptor.
func deferAccept(_, _ string, c syscall.RawConn) error {
	var err error
	controlErr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, int(HandshakeTimeout.Seconds()))
	})
	return cmp.Or(controlErr, err)
}

// hasUnreadBytes says, without reading them (MSG_PEEK), whether conn's client has sent bytes not read yet:
// at the accept, that it is not silent; once served, that it carries a request.
func hasUnreadBytes(conn net.Conn) bool {
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return false
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	_ = raw.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), make([]byte, 1), syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n > 0
}
