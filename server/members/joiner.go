package members

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"

	"kplane.dev/kplane/server/credentials"
)

// caCertsPath is where every server serves its CA, signed.
const caCertsPath = "/cacerts"

// retryInterval paces the requests a busy cluster asks to repeat.
const retryInterval = 500 * time.Millisecond

// Joiner is the side of a server that joins the cluster of Server.
type Joiner struct {
	// Server is the URL of a server of the cluster (--server).
	Server string
	// Token is the join token; Version this server's kplane version.
	Token, Version string
}

// TrustCA returns the cluster's CA, trusted because the server signed it
// with the join token: nothing secret is sent before it is known.
func (j Joiner) TrustCA(ctx context.Context) ([]byte, error) {
	// Nothing is trusted yet: the signature is what authenticates the CA.
	client := &http.Client{Timeout: requestTimeout + 5*time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Server+caCertsPath, nil)
	if err != nil {
		return nil, fmt.Errorf("--server %s: %w", j.Server, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the server %s (--server) is unreachable: %w", j.Server, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	caPEM, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the server %s (--server) did not serve its CA: %s %v", j.Server, resp.Status, err)
	}
	if !credentials.VerifyCA(j.Token, caPEM, resp.Header.Get(credentials.CAJoinSignatureHeader)) {
		return nil, fmt.Errorf("the server %s (--server) did not sign its CA with this join token: a wrong --join-token, or that server runs without one (start the first with --cluster-init --join-token)", j.Server)
	}
	return caPEM, nil
}

// Credentials returns the sealed credentials record of the cluster.
func (j Joiner) Credentials(ctx context.Context, caPEM []byte) ([]byte, error) {
	var out CredentialsResponse
	if err := j.call(ctx, caPEM, http.MethodGet, CredentialsPath, nil, &out); err != nil {
		return nil, err
	}
	return out.Record, nil
}

// Add adds a learner, asking again while the cluster is busy (another
// member joining) until ctx ends.
func (j Joiner) Add(ctx context.Context, caPEM []byte, ar AddRequest) (AddResponse, error) {
	var out AddResponse
	err := j.retry(ctx, func(ctx context.Context) error {
		return j.call(ctx, caPEM, http.MethodPost, MembersPath, ar, &out)
	})
	return out, err
}

// Promote asks until the member id is a voting member (the leader
// promotes a learner once it has caught up) or ctx ends.
func (j Joiner) Promote(ctx context.Context, caPEM []byte, id uint64) error {
	return j.retry(ctx, func(ctx context.Context) error {
		return j.call(ctx, caPEM, http.MethodPost, PromotePath, PromoteRequest{ID: strconv.FormatUint(id, 16)}, nil)
	})
}

// RemoveLearner removes the learner id after a join that failed, once.
func (j Joiner) RemoveLearner(ctx context.Context, caPEM []byte, id uint64) error {
	return j.call(ctx, caPEM, http.MethodDelete, MembersPath, PromoteRequest{ID: strconv.FormatUint(id, 16)}, nil)
}

// retryable is a refusal the cluster asks to repeat (503).
type retryable struct{ error }

// retry calls f until it succeeds, fails for good, or ctx ends; then it
// returns the last answer.
func (j Joiner) retry(ctx context.Context, f func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, retryInterval, true, func(ctx context.Context) (bool, error) {
		err := f(ctx)
		if ctx.Err() != nil && last != nil {
			// Cut short by the deadline: the answer before says more.
			return false, nil
		}
		last = err
		var again retryable
		if errors.As(last, &again) {
			return false, nil
		}
		return true, last
	})
	if err != nil && last != nil && !errors.Is(err, last) {
		return fmt.Errorf("%w (gave up: %v)", last, err)
	}
	return err
}

// call sends one request verified against caPEM and decodes the answer
// into out; a refusal is the server's Status message.
func (j Joiner) call(ctx context.Context, caPEM []byte, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, j.Server+path, body)
	if err != nil {
		return err
	}
	req.Header.Set(TokenHeader, j.Token)
	req.Header.Set("Content-Type", "application/json")
	client, err := verifyingClient(caPEM)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return retryable{fmt.Errorf("the server %s (--server) is unreachable: %w", j.Server, errors.Unwrap(err))}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return retryable{fmt.Errorf("the server %s (--server): %w", j.Server, err)}
	}
	if resp.StatusCode != http.StatusOK {
		refusal := fmt.Errorf("the server %s (--server) refused %s %s: %s", j.Server, method, path, statusMessage(resp.Status, data))
		if resp.StatusCode == http.StatusServiceUnavailable {
			return retryable{refusal}
		}
		return refusal
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the server %s (--server) answered %s with %q: %w", j.Server, path, data, err)
	}
	return nil
}

func statusMessage(status string, body []byte) string {
	var s metav1.Status
	if json.Unmarshal(body, &s) == nil && s.Message != "" {
		return s.Message
	}
	return status
}

// verifyingClient trusts servers whose certificate the kplane CA issued
// for serving, whatever name they are reached at: the CA is the cluster's
// own, so any server certificate of it is a server of the cluster, and a
// server reached at an address missing from its --tls-san still joins.
func verifyingClient(caPEM []byte) (*http.Client, error) {
	cas, err := certutil.ParseCertsPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA: %w", err)
	}
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("the server presented no certificate")
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		intermediates := x509.NewCertPool()
		for _, r := range raw[1:] {
			if c, err := x509.ParseCertificate(r); err == nil {
				intermediates.AddCert(c)
			}
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
	tlsConfig := &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: verify}
	return &http.Client{Timeout: requestTimeout + 5*time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}, nil
}
