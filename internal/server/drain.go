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

	"github.com/flyteorg/flyte-mpi-webhook/internal/server/conns"
)

const (
	// DefaultShutdownDrain is how long the webhook serves on after SIGTERM, for the API server and
	// kube-proxy to stop sending to the pod: with ShutdownTimeout it fits terminationGracePeriodSeconds.
	DefaultShutdownDrain = 15 * time.Second
	// ShutdownTimeout bounds the wait for the requests in flight: none takes longer than WriteTimeout.
	ShutdownTimeout = 10 * time.Second
)

// drain serves on, unready, for ShutdownDrain, then stops accepting and finishes the requests in flight.
func (s *webhookServer) drain(ctx context.Context, log logr.Logger, srv *http.Server, listener *conns.Listener, served <-chan error) error {
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
	// net/http's Shutdown closes, unanswered, a connection whose first request
	// it reads after it began: the connections accepted send theirs first.
	srv.SetKeepAlivesEnabled(false)
	if err := listener.Close(); err != nil {
		return fmt.Errorf("closing the webhook's listener: %w", err)
	}
	if err := <-served; !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("serving the webhook: %w", err)
	}
	listener.WaitForRequests(shutdownCtx)
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down the webhook: %w", err)
	}
	return nil
}

// closeWhileDraining closes each connection after its answer once draining, so the next request goes to a ready pod.
func (s *webhookServer) closeWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// StartedChecker fails until the webhook listens, and from the drain on; it does not dial (a dial waits behind a flood).
func (s *webhookServer) StartedChecker() healthz.Checker {
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
