package server

import (
	"bytes"
	"log"
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

// errorLog is an http.Server's ErrorLog, which writes what net/http has to
// say (an accept that failed, a panic) to log, whose sampling bounds a
// flood of it.
func errorLog(logger logr.Logger) *log.Logger {
	return log.New(logWriter(logger), "", 0)
}

type logWriter logr.Logger

func (w logWriter) Write(p []byte) (int, error) {
	logr.Logger(w).Info("net/http", "error", string(bytes.TrimSpace(p)))
	return len(p), nil
}
