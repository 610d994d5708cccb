//go:build linux

package conns

import (
	"cmp"
	"net"
	"syscall"
	"time"
)

// deferAccept has the kernel hand over a connection only once its client has sent a byte, or
// timeout after (TCP_DEFER_ACCEPT, nginx's listen ... deferred): until then it holds no descriptor.
func deferAccept(timeout time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		controlErr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, int(timeout.Seconds()))
		})
		return cmp.Or(controlErr, err)
	}
}

// hasUnreadBytes says, with a peek, whether conn's client has sent bytes not read yet.
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
