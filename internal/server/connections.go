package server

import (
	"net"

	"golang.org/x/net/netutil"
)

// The bounds on connections. Each port has its own bound, so that no flood
// of one starves another (the kubelet's probes above all).
const (
	// MaxConns bounds the webhook's open connections, shared among client
	// addresses (fair.go): the webhook port accepts every connection at
	// once, so that none of the API server's waits in the kernel's backlog
	// behind a flood, and beyond the bound a newcomer takes the place of
	// the flooding address's oldest, or waits (MaxWaitingConns). The API
	// servers keep a few keep-alive connections each, and at most
	// MaxInFlight requests are decided or waiting; the rest is for slow
	// clients' connections (which hold no body memory while they wait, see
	// MaxBufferedBytes).
	MaxConns = 512

	// MaxWaitingConns bounds the webhook port's connections waiting, unread,
	// for a place among MaxConns, when their address already holds the most
	// (fair.go): a lone API server's burst beyond MaxConns is served as
	// places free, as the kernel's backlog used to serve it, instead of
	// refused. When the queue is full its oldest is reset. With MaxConns and
	// the probe and metrics ports' MaxProbeConns each (512 + 2 × 192 + 64 =
	// 960) it leaves 64 of a file-descriptor limit of 1,024 for the
	// process's own (listeners, epoll, standard streams, the certificate
	// watcher's), a dozen of them: 128 would leave none.
	MaxWaitingConns = 64

	// MaxProbeConns bounds the open connections of the probe and metrics
	// ports, each; one beyond waits in the kernel's listen backlog,
	// unaccepted, where it costs the process neither memory nor a file
	// descriptor. The kubelet and Prometheus open one at a time, but a
	// connection refused a header holds its place for half a second
	// (net/http waits for the client to read the refusal): places for a
	// flood of them beside the kubelet. The three ports' bounds together,
	// with MaxWaitingConns, leave 64 of a file-descriptor limit of 1,024.
	MaxProbeConns = 192
)

// listen listens on address for at most maxConns connections at once.
func listen(address string, maxConns int) (net.Listener, error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(l, maxConns), nil
}
