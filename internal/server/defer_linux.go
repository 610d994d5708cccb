//go:build linux

package server

import (
	"net"
	"syscall"
)

// deferAccept has the kernel hand the webhook a connection only once its
// client has sent a byte, or HandshakeTimeout after (TCP_DEFER_ACCEPT, as
// nginx's listen ... deferred): a connection that sends nothing waits in the
// kernel's SYN queue, where it takes no place among MaxConns and no file
// descriptor. Above the SYN queue's size syncookies answer instead, and
// hand the connection over at once.
func deferAccept(_, _ string, c syscall.RawConn) error {
	var err error
	if controlErr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, int(HandshakeTimeout.Seconds()))
	}); controlErr != nil {
		return controlErr
	}
	return err
}

// sentFirstByte says whether conn's client has sent a byte the webhook has
// not read yet, without reading it (MSG_PEEK): a connection just accepted
// is not taken for a silent one while its handshake has not begun.
func sentFirstByte(conn net.Conn) bool {
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
