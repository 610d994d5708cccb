package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// DefaultShutdownDrain is how long the webhook keeps serving after SIGTERM by
// default: long enough for the API server and kube-proxy to stop sending to
// a terminating pod. With ShutdownTimeout and a margin for the process to
// exit it fits the Deployment's terminationGracePeriodSeconds (30), after
// which the kubelet kills the process.
const DefaultShutdownDrain = 15 * time.Second

// ShutdownTimeout bounds the wait, after the drain, for the requests in
// flight to finish: none takes longer than WriteTimeout, and the API server
// has given up on one long before.
const ShutdownTimeout = 10 * time.Second

// drain serves on, unready, for the drain, then stops accepting
// connections and finishes the requests in flight.
func (s *boundedServer) drain(ctx context.Context, log logr.Logger, srv *http.Server, listener *fairListener, served <-chan error) error {
	s.draining.Store(true)
	log.Info("draining: unready, still serving", "for", s.config.ShutdownDrain)
	select {
	case err := <-served:
		return fmt.Errorf("serving the webhook: %w", err)
	case <-s.drainDone(s.config.ShutdownDrain):
	}
	log.Info("shutting down: no new connections, finishing the requests in flight", "within", ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	// net/http's Shutdown closes, unanswered, a connection whose first
	// request it reads after it began. So: every answer closes its
	// connection from now on, the listener closes, and the connections it
	// accepted send their request (or are closed at ReadHeaderTimeout) before
	// Shutdown waits for the answers in flight. Closing stops the TCP
	// listener only: Serve returns once the handshakes under way, whose
	// client may have sent its request already (TLS 1.3), have reached it.
	srv.SetKeepAlivesEnabled(false)
	if err := listener.Close(); err != nil {
		return fmt.Errorf("closing the webhook's listener: %w", err)
	}
	if err := <-served; !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("serving the webhook: %w", err)
	}
	listener.waitForUnanswered(shutdownCtx)
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down the webhook: %w", err)
	}
	return nil
}

// closeWhileDraining asks each client to close its connection after its
// answer once the drain has started, so the API server's next request
// opens a new connection through the Service, to a ready pod, rather than
// reusing one the shutdown is about to close.
func (s *boundedServer) closeWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// StartedChecker fails until the webhook listens for TLS, and from the start
// of the drain on. It does not dial the webhook: under a flood of
// connections, a dial waits in the listen backlog, and an unready pod would
// leave the API server no endpoint at all.
func (s *boundedServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		switch {
		case s.draining.Load():
			return errors.New("the webhook is shutting down")
		case !s.serving.Load():
			return errors.New("the webhook server has not started yet")
		}
		return nil
	}
}
