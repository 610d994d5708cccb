package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// Issuer makes the CAs and serving certificates Plan asks for; the tests
// use it with a clock of their own.
type Issuer interface {
	// CA makes a CA valid for validity from now, and its key.
	CA(now time.Time, validity time.Duration) (*x509.Certificate, crypto.Signer, error)
	// Serving makes a serving certificate for dnsNames that ca signs with
	// caKey, valid for validity from now but not past ca, and its key.
	Serving(ca *x509.Certificate, caKey crypto.Signer, now time.Time, validity time.Duration, dnsNames []string) (*x509.Certificate, crypto.Signer, error)
}

// ECDSA is the Issuer of the webhook: ECDSA P-256 keys, as the chart's
// generated certificates and config/certmanager's (a TLS handshake signs
// about ten times faster than with RSA 2048), each certificate valid from
// Backdate before it is made.
type ECDSA struct {
	// CommonName is the CAs' common name, followed by @ and the Unix time
	// each is made, as Kubernetes names its self-signed CAs.
	CommonName string
}

var _ Issuer = ECDSA{}

// CA implements Issuer.
func (e ECDSA) CA(now time.Time, validity time.Duration) (*x509.Certificate, crypto.Signer, error) {
	template := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", e.CommonName, now.Unix())},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(template, nil, nil)
}

// Serving implements Issuer.
func (e ECDSA) Serving(ca *x509.Certificate, caKey crypto.Signer, now time.Time, validity time.Duration, dnsNames []string) (*x509.Certificate, crypto.Signer, error) {
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsNames[0]},
		DNSNames:    dnsNames,
		NotBefore:   now.Add(-Backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return sign(template, ca, caKey)
}

// sign makes template's certificate with a new key, signed by parent's
// parentKey, or self-signed when parent is nil.
func sign(template, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if template.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)); err != nil {
		return nil, nil, err
	}
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// encodeKey is key as PKCS #8 PEM, which tls.X509KeyPair reads.
func encodeKey(key crypto.Signer) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(err) // an ECDSA key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
