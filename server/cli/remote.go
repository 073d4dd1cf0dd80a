package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"kplane.dev/kplane/server/credentials"
)

// serverStartTimeout is how long a client given --server waits for the
// server to come up: a CI job starts next to a service container that may
// still be starting.
const serverStartTimeout = 2 * time.Minute

// remoteAdmin builds the admin credential of the server at serverURL from
// its admin token alone. The CA comes from the server's /cacerts over an
// unverified connection, and is trusted only if its signature checks out
// with the token: the token itself is sent only once the CA is trusted.
// It waits for the server to listen and be ready.
func remoteAdmin(ctx context.Context, serverURL, token string) (*admin, error) {
	server, err := parseServerURL(serverURL)
	if err != nil {
		return nil, err
	}
	token = strings.TrimSpace(token)
	ctx, cancel := context.WithTimeout(ctx, serverStartTimeout)
	defer cancel()
	var caPEM []byte
	for {
		caPEM, err = fetchCA(ctx, server, token)
		var unreachable *unreachableError
		if !errors.As(err, &unreachable) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (waited %s)", err, serverStartTimeout)
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, server, caPEM); err != nil {
		return nil, err
	}
	return &admin{raw: credentials.Kubeconfig("kplane", server, caPEM, token), server: server}, nil
}

// parseServerURL checks a --server URL and returns it as https://host:port.
func parseServerURL(serverURL string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("--server %q: want https://host:port", serverURL)
	}
	return "https://" + u.Host, nil
}

// unreachableError: the server does not answer (yet).
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

func fetchCA(ctx context.Context, server, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/cacerts", nil)
	if err != nil {
		return nil, err
	}
	// Unverified on purpose: the signature below is what establishes trust,
	// and nothing secret is sent.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	client.Timeout = 10 * time.Second
	resp, err := client.Do(req)
	if err != nil {
		return nil, &unreachableError{fmt.Errorf("fetching the CA from %s: %w", server, err)}
	}
	defer resp.Body.Close()
	caPEM, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("fetching the CA from %s: %w", server, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the CA from %s: %s", server, resp.Status)
	}
	signature := resp.Header.Get(credentials.CASignatureHeader)
	if signature == "" {
		return nil, fmt.Errorf("%s serves its CA unsigned (its admin token is shorter than %d characters); use --kubeconfig instead", server, credentials.MinAdminTokenLength)
	}
	if !credentials.VerifyCA(token, caPEM, signature) {
		return nil, fmt.Errorf("the CA served by %s is not signed with this token: wrong --token, or not the server you think", server)
	}
	return caPEM, nil
}

// waitReady polls /readyz, trusting caPEM, until it answers ok.
func waitReady(ctx context.Context, server string, caPEM []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s/cacerts holds no certificate", server)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		var badCert *tls.CertificateVerificationError
		if errors.As(err, &badCert) {
			return fmt.Errorf("%w (is the host name of --server in the server's --tls-san?)", err)
		}
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz: %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is not ready: %w", server, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
