package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/http"
	"time"

	"github.com/google/uuid"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/healthz"
	genericoptions "k8s.io/apiserver/pkg/server/options"
)

// loopbackValidity is how long the loopback certificate is valid, as
// upstream's: about three years, a new one at every start.
const loopbackValidity = (3*365 + 1) * 24 * time.Hour

// applySecureServing applies s to config and gives the server's own
// clients (config.LoopbackClientConfig) a certificate of their own, served
// for the loopback server name only: upstream's
// SecureServingOptionsWithLoopback.ApplyToConfig with an ECDSA key
// instead of two RSA ones (genericconfig.go).
func applySecureServing(s *genericoptions.SecureServingOptions, config *genericapiserver.Config) error {
	if err := s.ApplyTo(&config.SecureServing); err != nil {
		return err
	}
	if config.SecureServing == nil {
		return errors.New("the apiserver serves on no port: its own clients would have nothing to reach")
	}
	notAfter := time.Now().Add(loopbackValidity)
	certPEM, keyPEM, err := loopbackCertificate(genericapiserver.LoopbackClientServerNameOverride, notAfter)
	if err != nil {
		return fmt.Errorf("loopback certificate: %w", err)
	}
	provider, err := dynamiccertificates.NewStaticSNICertKeyContent("self-signed loopback", certPEM, keyPEM,
		genericapiserver.LoopbackClientServerNameOverride)
	if err != nil {
		return fmt.Errorf("loopback certificate: %w", err)
	}
	// First, so that it wins over any other certificate for the name.
	config.SecureServing.SNICerts = append([]dynamiccertificates.SNICertKeyContentProvider{provider}, config.SecureServing.SNICerts...)
	loopback, err := config.SecureServing.NewLoopbackClientConfig(uuid.New().String(), certPEM)
	if err != nil {
		return fmt.Errorf("loopback client: %w", err)
	}
	config.LoopbackClientConfig = loopback
	// As upstream: a server that outlived its loopback certificate is not
	// healthy (a restart makes a new one).
	expiry := healthz.NamedCheck("loopback-serving-certificate", func(*http.Request) error {
		if time.Now().After(notAfter) {
			return genericoptions.LoopbackCertificateExpiredError{}
		}
		return nil
	})
	config.AddHealthzChecks(expiry)
	config.AddLivezChecks(expiry)
	return nil
}

// loopbackCertificate returns a self-signed certificate for host and its
// key, PEM encoded: the certificate is its own CA, trusted by the loopback
// client alone.
func loopbackCertificate(host string, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
	if err != nil {
		return nil, nil, err
	}
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		// An hour back: a clock that steps back does not invalidate it.
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
