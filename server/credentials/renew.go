package credentials

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apiserver/pkg/server/healthz"
)

const (
	// maxRenewalWait bounds the wait between two renewal passes however far
	// the next renewal is: a clock that jumps, or a certificate replaced on
	// disk, is noticed within this period.
	maxRenewalWait = time.Hour
	// minRenewalWait keeps a certificate that is due again at once (a clock
	// gone wrong) from turning the loop into a busy one.
	minRenewalWait = time.Second
	// retryWait is the wait after a pass that failed (a full disk).
	retryWait = time.Minute
	// CertificatesCheck is the name of the readyz check on certificates.
	CertificatesCheck = "certificates"
)

// Issued is a leaf certificate the CA keeps valid: its files and what it
// must say.
type Issued struct {
	CertFile string
	KeyFile  string
	Leaf     Leaf
}

// Renewer keeps leaf certificates issued and renewed, at start-up
// (EnsureAll) and while the server runs (Run), so that a server up for
// longer than a certificate's lifetime never presents an expired one. Whoever
// uses a certificate reloads it from its files: the apiserver watches its
// serving certificate (dynamiccertificates), etcd and its clients read theirs
// at each TLS handshake.
type Renewer struct {
	ca     *CA
	issued []Issued
	now    func() time.Time

	mu sync.Mutex
	// certs are the certificates in use by file name, the CA's included.
	certs map[string]*x509.Certificate
}

// NewRenewer returns a Renewer of issued, signed by ca.
func NewRenewer(ca *CA, issued ...Issued) *Renewer {
	r := &Renewer{ca: ca, issued: issued, now: time.Now, certs: map[string]*x509.Certificate{}}
	r.certs[filepath.Base(ca.CertFile)] = ca.Cert
	return r
}

// EnsureAll issues every certificate that is missing, lacks a requested
// name or is due for renewal (RenewalTime), and returns when the next one
// falls due.
func (r *Renewer) EnsureAll() (time.Time, error) {
	var next time.Time
	for _, is := range r.issued {
		name := filepath.Base(is.CertFile)
		cert, err := r.ca.ensure(is.CertFile, is.KeyFile, is.Leaf, r.now())
		if err != nil {
			return time.Time{}, fmt.Errorf("certificate %s: %w", name, err)
		}
		r.mu.Lock()
		previous := r.certs[name]
		r.certs[name] = cert
		r.mu.Unlock()
		if previous != nil && !previous.Equal(cert) {
			logrus.WithFields(logrus.Fields{"certificate": name, "notAfter": cert.NotAfter.UTC().Format(time.RFC3339),
				"previousNotAfter": previous.NotAfter.UTC().Format(time.RFC3339)}).Info("certificate renewed")
		}
		if due := RenewalTime(cert); next.IsZero() || due.Before(next) {
			next = due
		}
	}
	return next, nil
}

// Run renews the certificates as they fall due, until ctx is done.
func (r *Renewer) Run(ctx context.Context) {
	for {
		wait := retryWait
		if next, err := r.EnsureAll(); err != nil {
			logrus.WithError(err).Error("renewing certificates failed; retrying in a minute")
		} else {
			wait = min(max(next.Sub(r.now()), minRenewalWait), maxRenewalWait)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// Expiry is when a certificate in use expires.
type Expiry struct {
	Name     string
	NotAfter time.Time
}

// Expiries lists the certificates in use by name, the CA's included.
func (r *Renewer) Expiries() []Expiry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Expiry, 0, len(r.certs))
	for name, cert := range r.certs {
		out = append(out, Expiry{Name: name, NotAfter: cert.NotAfter})
	}
	slices.SortFunc(out, func(a, b Expiry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ReadyzCheck is the readyz check of the certificates: it fails once one of
// them has expired, and its name carries their expiry dates, which is what
// /readyz?verbose prints of a check:
//
//	[+]certificates (ca.crt until 2036-05-30T10:00:00Z, serving.crt until 2027-06-01T10:00:00Z) ok
//
// Its group is CertificatesCheck ("certificates"): /readyz?exclude=certificates
// leaves it out.
func (r *Renewer) ReadyzCheck() healthz.GroupedHealthChecker { return certificatesCheck{r} }

type certificatesCheck struct{ r *Renewer }

func (c certificatesCheck) Name() string {
	var until []string
	for _, e := range c.r.Expiries() {
		until = append(until, e.Name+" until "+e.NotAfter.UTC().Format(time.RFC3339))
	}
	return CertificatesCheck + " (" + strings.Join(until, ", ") + ")"
}

func (c certificatesCheck) GroupName() string { return CertificatesCheck }

func (c certificatesCheck) Check(*http.Request) error {
	now := c.r.now()
	var expired []string
	for _, e := range c.r.Expiries() {
		if !now.Before(e.NotAfter) {
			expired = append(expired, e.Name+" expired at "+e.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	if len(expired) > 0 {
		return fmt.Errorf("%s", strings.Join(expired, ", "))
	}
	return nil
}
