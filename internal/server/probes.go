package server

import (
	"net/http"
	"time"

	"github.com/go-logr/logr"
)

// MaxProbeHeaderBytes bounds a probe's or a scrape's headers, a few hundred
// bytes (a bearer token at most).
const MaxProbeHeaderBytes = 8 << 10

// probeServer serves handler on a probe or metrics port, with the bounds of
// the webhook port's headers and none of its TLS: the kubelet probes in
// plain HTTP. Its connections are bounded by MaxProbeConns (listen).
func probeServer(handler http.Handler, logger logr.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		MaxHeaderBytes:    MaxProbeHeaderBytes,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadHeaderTimeout,
		WriteTimeout:      ReadHeaderTimeout + 5*time.Second,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          errorLog(logger),
	}
}
