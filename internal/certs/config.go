// Package certs is the webhook's own certificate source: it keeps a CA and
// a serving certificate in one Secret, writes the serving certificate into
// the server's --cert-dir, and the CA into the caBundle of one
// MutatingWebhookConfiguration, renewing each before it expires. Nothing of
// it is rendered by the chart, so that two renders of the same values are
// the same bytes, as a GitOps sync needs (certificates.source=self).
//
// Plan, in plan.go, is the whole decision: from the Secret's data, the
// caBundle the configuration holds and the time, what to write. It has no
// client and is table-tested. A CA is replaced in three steps, each waiting
// Grace for the one before to reach every replica and the API server, so
// that no call finds a certificate that the caBundle does not trust:
//
//  1. a new CA is added to the Secret's ca.crt, before the old one, and so
//     to the caBundle; the serving certificate is still the old CA's;
//  2. once the caBundle holds the new CA, Grace after it was made, the
//     serving certificate is reissued by it;
//  3. Grace after that, the old CA leaves ca.crt and the caBundle.
//
// A serving certificate alone is renewed by the same CA in one step. The
// Rotator, in rotator.go, is the controller that reads the two objects
// through a cache limited to their names (RBAC by resourceNames allows
// that, and no other list or watch), applies what Plan says, and answers
// the readiness check.
package certs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Config is where the webhook keeps its certificates. cmd/webhook binds a
// flag to each field but Grace (bindCertFlags), its help repeating what is
// said here; DefaultConfig gives the defaults.
type Config struct {
	// Secret is the Secret, as namespace/name, that holds the CA (ca.crt,
	// ca.key) and the serving certificate (tls.crt, tls.key)
	// (--cert-secret). It must exist: the webhook gets, watches and
	// updates it, and never creates it, since RBAC cannot limit a create
	// to one name. Defaults to empty: the webhook makes no certificate and
	// serves the files of --cert-dir, which someone else writes.
	Secret string
	// Configuration is the name of the MutatingWebhookConfiguration whose
	// webhooks' caBundle the webhook writes, with Secret
	// (--cert-webhook-configuration). Required with Secret.
	Configuration string
	// DNSNames are the names the serving certificate is made for, with
	// Secret: the Service's, <service>.<namespace>.svc (--cert-dns-names).
	// The first is its common name, and the name the readiness check
	// verifies it for. Required with Secret.
	DNSNames []string
	// CAValidity is how long a CA is valid; it is replaced once two thirds
	// of that have passed (--cert-ca-validity). Defaults to
	// DefaultCAValidity, 87600h (ten years).
	CAValidity time.Duration
	// Validity is how long a serving certificate is valid, at most until
	// its CA expires; it is renewed once two thirds of that have passed
	// (--cert-validity). Defaults to DefaultValidity, 8760h (a year).
	Validity time.Duration
	// Grace is how long a step of a CA's replacement waits for the one
	// before to reach every replica (through its watch of the Secret, and
	// the reload of --cert-dir, at most 10 s) and the API server (through
	// its watch of the configuration); no flag's: the tests shorten it.
	// Defaults to DefaultGrace, 1m.
	Grace time.Duration
}

// The defaults of Config.
const (
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	DefaultValidity   = 365 * 24 * time.Hour
	DefaultGrace      = time.Minute
)

// MinValidity is the shortest Validity: a renewal every two thirds of it
// must leave each step of a CA's replacement its Grace.
const MinValidity = 5 * time.Minute

// DefaultConfig returns the settings the webhook runs with when no flag is
// given: no Secret, so no certificate of its own.
func DefaultConfig() Config {
	return Config{CAValidity: DefaultCAValidity, Validity: DefaultValidity, Grace: DefaultGrace}
}

// Enabled says whether the webhook keeps its certificates itself.
func (c Config) Enabled() bool { return c.Secret != "" }

// SecretKey parses Secret.
func (c Config) SecretKey() (types.NamespacedName, error) {
	namespace, name, ok := strings.Cut(c.Secret, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--cert-secret=%q: want namespace/name", c.Secret)
	}
	return types.NamespacedName{Namespace: namespace, Name: name}, nil
}

// Validate says what is wrong with c, naming the flag, when Secret is set.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	_, err := c.SecretKey()
	var errs []error
	errs = append(errs, err)
	if c.Configuration == "" {
		errs = append(errs, errors.New("--cert-webhook-configuration is required with --cert-secret: the MutatingWebhookConfiguration whose caBundle the webhook writes"))
	}
	if len(c.DNSNames) == 0 {
		errs = append(errs, errors.New("--cert-dns-names is required with --cert-secret: the Service's names, <service>.<namespace>.svc"))
	}
	if c.Validity < MinValidity {
		errs = append(errs, fmt.Errorf("--cert-validity=%s: at least %s", c.Validity, MinValidity))
	} else if c.Grace <= 0 || 3*c.Grace > c.Validity {
		errs = append(errs, fmt.Errorf("grace %s: more than 0 and at most a third of --cert-validity, %s", c.Grace, c.Validity))
	}
	if c.CAValidity < c.Validity {
		errs = append(errs, fmt.Errorf("--cert-ca-validity=%s: at least --cert-validity, %s", c.CAValidity, c.Validity))
	}
	return errors.Join(errs...)
}
