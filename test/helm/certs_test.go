package helm

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
)

// verifyServing checks that the serving certificate certB64 (base64 PEM,
// as a Secret's data holds it) is signed by the CA caB64 and valid for dnsName.
func verifyServing(caB64, certB64, dnsName string) error {
	parse := func(name, b64 string) (*x509.Certificate, error) {
		der, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		block, _ := pem.Decode(der)
		if block == nil {
			return nil, fmt.Errorf("%s: no PEM block", name)
		}
		return x509.ParseCertificate(block.Bytes)
	}
	ca, err := parse("ca.crt", caB64)
	if err != nil {
		return err
	}
	cert, err := parse("tls.crt", certB64)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName}); err != nil {
		return fmt.Errorf("the serving certificate, for %s: %w", dnsName, err)
	}
	return nil
}
