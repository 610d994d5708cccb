package certs

import (
	"crypto/x509"
	"encoding/pem"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	t0       = time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	dnsNames = []string{"hook.ns.svc", "hook.ns.svc.cluster.local"}
	issuer   = ECDSA{CommonName: "test-ca"}
)

// testConfig has lifetimes short enough for a test to walk through:
// a serving certificate renewed every 18m, a CA every 2h.
func testConfig() Config {
	return Config{Secret: "ns/certs", Configuration: "hooks", DNSNames: dnsNames,
		CAValidity: 3 * time.Hour, Validity: 27 * time.Minute, Grace: time.Minute}
}

// walk applies Plan at from, then at each recheck up to until, each
// caBundle published at once, and returns the Secret's data.
func walk(t *testing.T, data map[string][]byte, from, until time.Time) map[string][]byte {
	t.Helper()
	var published []byte
	for now := from; !now.After(until); {
		step := plan(t, now, data, published)
		data, published = applied(data, step), step.CABundle
		now = step.Recheck
	}
	return data
}

func plan(t *testing.T, now time.Time, data map[string][]byte, published []byte) Step {
	t.Helper()
	step, err := Plan(testConfig(), now, data, published, issuer)
	if err != nil {
		t.Fatal(err)
	}
	return step
}

// applied is the Secret's data once step is written.
func applied(data map[string][]byte, step Step) map[string][]byte {
	if step.Data != nil {
		return step.Data
	}
	return data
}

func leafOf(t *testing.T, data map[string][]byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data[KeyCert])
	if block == nil {
		t.Fatal("no tls.crt")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func commonNames(certs []*x509.Certificate) []string {
	var names []string
	for _, c := range certs {
		names = append(names, strings.Split(c.Subject.CommonName, "@")[0]+"@"+c.NotBefore.Add(Backdate).Sub(t0).String())
	}
	return names
}

// TestPlan walks through each case from a state Plan made itself: the
// changes it says, and the CAs of the bundle, named by when each was made
// (the time after t0).
func TestPlan(t *testing.T) {
	cfg := testConfig()
	// Steady: what Plan makes of an empty Secret at t0, published; then
	// the Secret just before the CA is due, at 2h (its last serving
	// certificate made at 1h48m), and during the CA's replacement: the new
	// CA added, then the serving certificate moved to it.
	steady := walk(t, nil, t0, t0)
	caDue := t0.Add(2 * time.Hour)
	beforeCADue := walk(t, nil, t0, caDue.Add(-time.Second))
	replacing := applied(beforeCADue, plan(t, caDue, beforeCADue, beforeCADue[KeyCA]))
	switched := applied(replacing, plan(t, caDue.Add(cfg.Grace), replacing, replacing[KeyCA]))

	withoutKey := func(data map[string][]byte, keys ...string) map[string][]byte {
		out := maps.Clone(data)
		for _, k := range keys {
			delete(out, k)
		}
		return out
	}
	garbage := map[string][]byte{KeyCA: []byte("junk"), KeyCAKey: []byte("junk"), KeyCert: []byte("junk"), KeyKey: []byte("junk"), "other": []byte("kept")}

	for _, tc := range []struct {
		name      string
		now       time.Time
		data      map[string][]byte
		published []byte
		// wantChanges are Step.Changes; wantCAs the bundle's CAs; wantServedBy
		// the CA (as in wantCAs) that signs the serving certificate.
		wantChanges  []string
		wantCAs      []string
		wantServedBy string
		wantRecheck  time.Duration // after t0
	}{{
		name: "an empty Secret gets a CA and a serving certificate", now: t0,
		wantChanges:  []string{"new CA (no CA)", "new serving certificate (none valid)"},
		wantCAs:      []string{"test-ca@0s"},
		wantServedBy: "test-ca@0s", wantRecheck: 18 * time.Minute,
	}, {
		name: "garbage is replaced, other keys kept", now: t0, data: garbage,
		wantChanges:  []string{"new CA (no CA)", "new serving certificate (none valid)"},
		wantCAs:      []string{"test-ca@0s"},
		wantServedBy: "test-ca@0s", wantRecheck: 18 * time.Minute,
	}, {
		name: "steady: nothing to write, recheck at the serving certificate's renewal", now: t0.Add(10 * time.Minute),
		data: steady, published: steady[KeyCA],
		wantCAs: []string{"test-ca@0s"}, wantServedBy: "test-ca@0s", wantRecheck: 18 * time.Minute,
	}, {
		name: "a serving certificate due is renewed by the same CA: the bundle stays", now: t0.Add(18 * time.Minute),
		data: steady, published: steady[KeyCA],
		wantChanges: []string{"serving certificate renewed"},
		wantCAs:     []string{"test-ca@0s"}, wantServedBy: "test-ca@0s", wantRecheck: 36 * time.Minute,
	}, {
		name: "tls.crt deleted: a new serving certificate at once, the bundle stays", now: t0.Add(10 * time.Minute),
		data: withoutKey(steady, KeyCert), published: steady[KeyCA],
		wantChanges: []string{"new serving certificate (none valid)"},
		wantCAs:     []string{"test-ca@0s"}, wantServedBy: "test-ca@0s", wantRecheck: 28 * time.Minute,
	}, {
		name: "a CA due: a new CA before it, the serving certificate still the old's", now: caDue,
		data: beforeCADue, published: beforeCADue[KeyCA],
		wantChanges: []string{"new CA (the CA is due for renewal)"},
		wantCAs:     []string{"test-ca@2h0m0s", "test-ca@0s"}, wantServedBy: "test-ca@0s", wantRecheck: 2*time.Hour + time.Minute,
	}, {
		name: "ca.key deleted: a new CA, the old one kept while it signs what is served", now: t0.Add(10 * time.Minute),
		data: withoutKey(steady, KeyCAKey), published: steady[KeyCA],
		wantChanges: []string{"new CA (ca.key does not match ca.crt's first CA)"},
		wantCAs:     []string{"test-ca@10m0s", "test-ca@0s"}, wantServedBy: "test-ca@0s", wantRecheck: 11 * time.Minute,
	}, {
		name: "the new CA not yet in the caBundle: the serving certificate waits", now: caDue.Add(5 * time.Minute),
		data: replacing, published: beforeCADue[KeyCA],
		wantCAs: []string{"test-ca@2h0m0s", "test-ca@0s"}, wantServedBy: "test-ca@0s", wantRecheck: 2*time.Hour + 6*time.Minute,
	}, {
		name: "the new CA in the caBundle for less than Grace: the serving certificate waits", now: caDue.Add(30 * time.Second),
		data: replacing, published: replacing[KeyCA],
		wantCAs: []string{"test-ca@2h0m0s", "test-ca@0s"}, wantServedBy: "test-ca@0s", wantRecheck: 2*time.Hour + time.Minute,
	}, {
		name: "the new CA in the caBundle for Grace: the serving certificate moves to it", now: caDue.Add(time.Minute),
		data: replacing, published: replacing[KeyCA],
		wantChanges: []string{"serving certificate from the new CA"},
		wantCAs:     []string{"test-ca@2h0m0s", "test-ca@0s"}, wantServedBy: "test-ca@2h0m0s", wantRecheck: 2*time.Hour + 2*time.Minute,
	}, {
		name: "the old CA kept for Grace after the move", now: caDue.Add(90 * time.Second),
		data: switched, published: switched[KeyCA],
		wantCAs: []string{"test-ca@2h0m0s", "test-ca@0s"}, wantServedBy: "test-ca@2h0m0s", wantRecheck: 2*time.Hour + 2*time.Minute,
	}, {
		name: "then dropped", now: caDue.Add(2 * time.Minute),
		data: switched, published: switched[KeyCA],
		wantChanges: []string{"1 CA(s) before the new one dropped"},
		wantCAs:     []string{"test-ca@2h0m0s"}, wantServedBy: "test-ca@2h0m0s", wantRecheck: 2*time.Hour + 19*time.Minute,
	}, {
		name: "an expired CA is dropped, with what it signed", now: t0.Add(3*time.Hour + time.Second),
		data: replacing, published: replacing[KeyCA],
		wantChanges: []string{"new serving certificate (none valid)"},
		wantCAs:     []string{"test-ca@2h0m0s"}, wantServedBy: "test-ca@2h0m0s", wantRecheck: 3*time.Hour + 18*time.Minute + time.Second,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			step := plan(t, tc.now, tc.data, tc.published)
			if diff := cmp.Diff(tc.wantChanges, step.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			got := applied(tc.data, step)
			if string(got[KeyCA]) != string(step.CABundle) {
				t.Error("the caBundle is not the Secret's ca.crt")
			}
			cas := CAs(step.CABundle)
			if diff := cmp.Diff(tc.wantCAs, commonNames(cas)); diff != "" {
				t.Errorf("the caBundle's CAs (-want +got):\n%s", diff)
			}
			leaf := leafOf(t, got)
			if servedBy := commonNames([]*x509.Certificate{issuerOf(t, leaf, cas, tc.now)}); servedBy[0] != tc.wantServedBy {
				t.Errorf("the serving certificate is signed by %s, want %s", servedBy[0], tc.wantServedBy)
			}
			if caKey := caSigner(cas, got[KeyCAKey]); caKey == nil {
				t.Error("ca.key is not the key of ca.crt's first CA")
			}
			if got := step.Recheck.Sub(t0); got != tc.wantRecheck {
				t.Errorf("recheck at t0+%s, want t0+%s", got, tc.wantRecheck)
			}
			if tc.data["other"] != nil && string(got["other"]) != "kept" {
				t.Error("a key of the Secret's own was dropped")
			}
		})
	}
}

// issuerOf is the CA of cas that signed leaf.
func issuerOf(t *testing.T, leaf *x509.Certificate, cas []*x509.Certificate, now time.Time) *x509.Certificate {
	t.Helper()
	for _, ca := range cas {
		if Verify(leaf, []*x509.Certificate{ca}, dnsNames[0], now) == nil {
			return ca
		}
	}
	t.Fatalf("no CA of the bundle signed the serving certificate %s", leaf.Subject.CommonName)
	return nil
}

// TestPlanNeverServesUntrusted runs Plan over two CA lifetimes as the
// Rotator does, with every write reaching the replicas and the API server
// late (within Grace, in any order), and checks, every 10 seconds, that
// each certificate a replica may serve is trusted by each caBundle the API
// server may hold.
func TestPlanNeverServesUntrusted(t *testing.T) {
	cfg := testConfig()
	const lag = 50 * time.Second // below Grace (1m): how late a write reaches anyone
	type version struct {
		at          time.Time
		cert, cabun []byte
	}
	var data map[string][]byte
	var published []byte
	var history []version // what was written, when
	renewals, caRenewals := 0, 0
	for now := t0; now.Before(t0.Add(2 * cfg.CAValidity)); now = now.Add(10 * time.Second) {
		step, err := Plan(cfg, now, data, published, issuer)
		if err != nil {
			t.Fatal(err)
		}
		if step.Data != nil {
			for _, c := range step.Changes {
				switch {
				case strings.HasPrefix(c, "new CA"):
					caRenewals++
				case strings.HasPrefix(c, "serving"):
					renewals++
				}
			}
			data = step.Data
		}
		published = step.CABundle
		if len(history) == 0 || string(history[len(history)-1].cert) != string(data[KeyCert]) || string(history[len(history)-1].cabun) != string(published) {
			history = append(history, version{at: now, cert: data[KeyCert], cabun: published})
		}
		// What anyone may hold now: the newest version, and every one
		// written within lag before, plus the one before those.
		var current []version
		for i := len(history) - 1; i >= 0; i-- {
			current = append(current, history[i])
			if now.Sub(history[i].at) >= lag {
				break
			}
		}
		for _, served := range current {
			leaf := leafOf(t, map[string][]byte{KeyCert: served.cert})
			for _, bundle := range current {
				if err := Verify(leaf, CAs(bundle.cabun), dnsNames[0], now); err != nil {
					t.Fatalf("at t0+%s, the certificate written at t0+%s is not trusted by the caBundle written at t0+%s: %v",
						now.Sub(t0), served.at.Sub(t0), bundle.at.Sub(t0), err)
				}
			}
		}
	}
	// Two CA lifetimes: the CA is replaced at 2h and 4h, the serving
	// certificate renewed every 20m and moved to each new CA.
	if caRenewals != 3 || renewals < 15 {
		t.Errorf("%d CAs made, %d serving certificates renewed: the walk did not rotate", caRenewals, renewals)
	}
}

func TestConfigValidate(t *testing.T) {
	valid := testConfig()
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string // a substring of the error; "" for none
	}{
		{"valid", func(*Config) {}, ""},
		{"off", func(c *Config) { *c = DefaultConfig() }, ""},
		{"no namespace", func(c *Config) { c.Secret = "certs" }, `--cert-secret="certs": want namespace/name`},
		{"no configuration", func(c *Config) { c.Configuration = "" }, "--cert-webhook-configuration is required"},
		{"no DNS names", func(c *Config) { c.DNSNames = nil }, "--cert-dns-names is required"},
		{"validity too short", func(c *Config) { c.Validity = time.Minute }, "--cert-validity=1m0s: at least 5m0s"},
		{"CA shorter than the serving certificate", func(c *Config) { c.CAValidity = 10 * time.Minute }, "--cert-ca-validity=10m0s: at least --cert-validity"},
		{"grace too long", func(c *Config) { c.Grace = 11 * time.Minute }, "grace 11m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid
			tc.change(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
