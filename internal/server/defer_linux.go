//go:build linux

package server

import "syscall"

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
