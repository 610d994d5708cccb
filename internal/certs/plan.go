package certs

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"strings"
	"time"
)

// The keys of the Secret.
const (
	// KeyCA holds the PEM certificates of the CAs the caBundle trusts: the
	// one that signs first, then, during its replacement, the one before.
	KeyCA = "ca.crt"
	// KeyCAKey holds the PEM private key of the first CA of KeyCA.
	KeyCAKey = "ca.key"
	// KeyCert and KeyKey hold the serving certificate and its private key,
	// the files of --cert-dir.
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
)

// Step is what Plan says to write.
type Step struct {
	// Data is the Secret's data to write, or nil when it holds what it should.
	Data map[string][]byte
	// CABundle is the caBundle every webhook of the configuration must
	// hold: the Secret's ca.crt, as Data (or the Secret) has it.
	CABundle []byte
	// Recheck is when to plan again, with nothing changed: a renewal, or
	// the end of a step's Grace.
	Recheck time.Time
	// Changes says what Data changes, for the log; empty when nothing.
	Changes []string
}

// Plan decides, from the Secret's data, the caBundle the configuration
// holds now (published; nil when there is no configuration) and the time,
// what the Secret and the caBundle must hold. See the package doc for the
// order of a CA's replacement. Plan keeps the Secret's other keys.
func Plan(c Config, now time.Time, data map[string][]byte, published []byte, issue Issuer) (Step, error) {
	recheck, before := recheckAt{}, data[KeyCA]
	cas := trustedCAs(data[KeyCA], now)
	var changes []string

	// The signing CA: the first of ca.crt, with its key, not due for renewal.
	signer := caSigner(cas, data[KeyCAKey])
	if signer == nil || due(cas[0], now) {
		ca, key, err := issue.CA(now, c.CAValidity)
		if err != nil {
			return Step{}, fmt.Errorf("making a CA: %w", err)
		}
		reason := "no CA"
		if signer != nil {
			reason = "the CA is due for renewal"
		} else if len(cas) > 0 {
			reason = "ca.key does not match ca.crt's first CA"
		}
		changes = append(changes, "new CA ("+reason+")")
		cas = append([]*x509.Certificate{ca}, cas...)
		signer = key
		data = withKey(data, KeyCAKey, encodeKey(key))
	}
	recheck.add(renewal(cas[0]))

	// The serving certificate.
	served := servingCertificate(data, c.DNSNames, now)
	switch {
	case served == nil || !verifies(served, cas, c.DNSNames[0], now):
		// Nothing a client trusts is served: a new one at once.
		changes = append(changes, "new serving certificate (none valid)")
		served = nil
	case !verifies(served, cas[:1], c.DNSNames[0], now):
		// The old CA's, while a new CA is being published: switch once the
		// caBundle has held the new one for Grace. Until it holds it, look
		// again a Grace later, not at once: its update is an event anyway.
		if at := issued(cas[0]).Add(c.Grace); !holds(published, cas[0]) || now.Before(at) {
			if !holds(published, cas[0]) && at.Before(now.Add(c.Grace)) {
				at = now.Add(c.Grace)
			}
			recheck.add(at)
			break
		}
		changes = append(changes, "serving certificate from the new CA")
		served = nil
	case due(served, now):
		changes = append(changes, "serving certificate renewed")
		served = nil
	}
	if served == nil {
		cert, key, err := issue.Serving(cas[0], signer, now, c.Validity, c.DNSNames)
		if err != nil {
			return Step{}, fmt.Errorf("making the serving certificate: %w", err)
		}
		data = withKey(data, KeyCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
		data = withKey(data, KeyKey, encodeKey(key))
		served = cert
	}
	recheck.add(renewal(served))

	// The CAs before the signing one: kept until the serving certificate
	// has been the signing CA's for Grace, then dropped.
	if len(cas) > 1 && verifies(served, cas[:1], c.DNSNames[0], now) {
		if at := issued(served).Add(c.Grace); now.Before(at) {
			recheck.add(at)
		} else {
			changes = append(changes, fmt.Sprintf("%d CA(s) before the new one dropped", len(cas)-1))
			cas = cas[:1]
		}
	}
	for _, ca := range cas[1:] {
		recheck.add(ca.NotAfter)
	}

	bundle := encodeCerts(cas)
	data = withKey(data, KeyCA, bundle)
	step := Step{CABundle: bundle, Recheck: recheck.at, Changes: changes}
	if len(changes) > 0 || !bytes.Equal(before, bundle) {
		if len(changes) == 0 {
			changes = append(changes, "expired or invalid CAs dropped")
			step.Changes = changes
		}
		step.Data = data
	}
	return step, nil
}

// Backdate is how long before it is made a certificate starts to be
// valid, for the clocks of the API server and the nodes that run behind
// the webhook's. issued reads it back.
const Backdate = 5 * time.Minute

// issued is when a certificate was made, as Issuer makes them.
func issued(c *x509.Certificate) time.Time { return c.NotBefore.Add(Backdate) }

// renewal is when a certificate is due: two thirds of the way from when it
// was made to when it expires, as cert-manager renews by default.
func renewal(c *x509.Certificate) time.Time {
	from := issued(c)
	if from.After(c.NotAfter) {
		from = c.NotBefore
	}
	return from.Add(c.NotAfter.Sub(from) * 2 / 3)
}

func due(c *x509.Certificate, now time.Time) bool { return !now.Before(renewal(c)) }

// trustedCAs parses ca.crt, keeping the CAs still valid, in order.
func trustedCAs(bundle []byte, now time.Time) []*x509.Certificate {
	var cas []*x509.Certificate
	for _, c := range parseCerts(bundle) {
		if c.IsCA && now.Before(c.NotAfter) && !now.Before(c.NotBefore) {
			cas = append(cas, c)
		}
	}
	return cas
}

func parseCerts(bundle []byte) []*x509.Certificate {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			return certs
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			certs = append(certs, c)
		}
	}
}

// caSigner is the key of cas[0], from ca.key, or nil when it is absent or
// does not match.
func caSigner(cas []*x509.Certificate, keyPEM []byte) crypto.Signer {
	if len(cas) == 0 {
		return nil
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil
	}
	if public, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !public.Equal(cas[0].PublicKey) {
		return nil
	}
	return signer
}

// servingCertificate is tls.crt, when it matches tls.key, is valid now and
// names every DNS name.
func servingCertificate(data map[string][]byte, dnsNames []string, now time.Time) *x509.Certificate {
	pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil || len(pair.Certificate) == 0 {
		return nil
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
		return nil
	}
	for _, name := range dnsNames {
		if leaf.VerifyHostname(name) != nil {
			return nil
		}
	}
	return leaf
}

// verifies says whether one of cas signed leaf, for dnsName at now.
func verifies(leaf *x509.Certificate, cas []*x509.Certificate, dnsName string, now time.Time) bool {
	return Verify(leaf, cas, dnsName, now) == nil
}

// Verify verifies leaf for dnsName at now, as the API server does with the
// caBundle cas: a server certificate.
func Verify(leaf *x509.Certificate, cas []*x509.Certificate, dnsName string, now time.Time) error {
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// holds says whether the caBundle published holds ca.
func holds(published []byte, ca *x509.Certificate) bool {
	for _, c := range parseCerts(published) {
		if c.Equal(ca) {
			return true
		}
	}
	return false
}

// CAs parses a caBundle.
func CAs(bundle []byte) []*x509.Certificate { return parseCerts(bundle) }

func encodeCerts(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// withKey returns a copy of data with key set to value; data is never
// changed in place, since it is the cache's.
func withKey(data map[string][]byte, key string, value []byte) map[string][]byte {
	out := maps.Clone(data)
	if out == nil {
		out = map[string][]byte{}
	}
	out[key] = value
	return out
}

// recheckAt keeps the earliest of the times added.
type recheckAt struct{ at time.Time }

func (r *recheckAt) add(t time.Time) {
	if r.at.IsZero() || t.Before(r.at) {
		r.at = t
	}
}

// String lists a Step's changes.
func (s Step) String() string {
	if len(s.Changes) == 0 {
		return "no change"
	}
	return strings.Join(s.Changes, "; ")
}
