package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kplane.dev/kplane/server/credentials"
)

// remoteAdmin builds the admin credential of the server at serverURL from
// its admin token alone. The CA comes from the server's /cacerts over an
// unverified connection, and is trusted only if its signature checks out
// with the token: the token itself is sent only once the CA is trusted.
func remoteAdmin(ctx context.Context, serverURL, token string) (*admin, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("--server %q: want https://host:port", serverURL)
	}
	server := "https://" + u.Host
	caPEM, err := fetchCA(ctx, server, token)
	if err != nil {
		return nil, err
	}
	raw := clientcmdapi.NewConfig()
	raw.Clusters["kplane"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	raw.AuthInfos["kplane-admin"] = &clientcmdapi.AuthInfo{Token: token}
	raw.Contexts["kplane"] = &clientcmdapi.Context{Cluster: "kplane", AuthInfo: "kplane-admin"}
	raw.CurrentContext = "kplane"
	return &admin{raw: raw, server: server}, nil
}

func fetchCA(ctx context.Context, server, token string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/cacerts", nil)
	if err != nil {
		return nil, err
	}
	// Unverified on purpose: the signature below is what establishes trust,
	// and nothing secret is sent.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the CA from %s: %w", server, err)
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
	if !credentials.VerifyCA(strings.TrimSpace(token), caPEM, signature) {
		return nil, fmt.Errorf("the CA served by %s is not signed with this token: wrong --token, or not the server you think", server)
	}
	return caPEM, nil
}
