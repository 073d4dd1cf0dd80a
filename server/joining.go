package server

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"kplane.dev/kplane/datastore"
	"kplane.dev/kplane/server/credentials"
	"kplane.dev/kplane/server/join"
	"kplane.dev/kplane/server/version"
)

// join makes the data dir hold the credentials every server of the
// datastore shares before any certificate is issued from them: the
// datastore's (a later server) or this server's, stored there (the first).
// It returns the datastore it started for it, for New, and the planes'
// service-account issuer base URL of every server. A refusal is one line;
// nothing has been served and the datastore is left as it was.
func (c *Config) join(ctx context.Context) (*datastore.Datastore, string, error) {
	// Joining is for shared datastores only (validateJoin): none of them
	// needs the kplane CA, which may not exist yet.
	store, err := c.listenDatastore(ctx, datastore.TLS{}, nil)
	if err != nil {
		return nil, "", fmt.Errorf("refusing to start: %w", err)
	}
	issuer, err := c.joinDatastore(ctx, store)
	if err != nil {
		store.Close()
		return nil, "", err
	}
	return store, issuer, nil
}

// joinDatastore leaves the data dir holding the credentials of the
// datastore's record, or stores this server's as the record (the first
// server); it returns the service-account issuer base URL.
func (c *Config) joinDatastore(ctx context.Context, store *datastore.Datastore) (string, error) {
	client, err := store.Client()
	if err != nil {
		return "", err
	}
	defer client.Close()
	joiner := c.credentialsJoiner()
	joiner.KV = client
	joined, err := joiner.Join(ctx)
	if err != nil {
		return "", fmt.Errorf("refusing to start: %w", err)
	}
	logrus.WithField("datastore", store.Description).WithField("serviceAccountIssuer", joined.ServiceAccountIssuer).Info(string(joined.Outcome))
	return joined.ServiceAccountIssuer, nil
}

// credentialsJoiner joins the shared credentials of this server's data
// dir with the record, its KV to be set for a join through the datastore.
func (c *Config) credentialsJoiner() join.Joiner {
	return join.Joiner{
		Token: c.JoinToken, Version: version.Version, Issuer: c.ServerURL,
		DataDir: c.DataDir, Files: c.sharedFiles(), Generate: c.ensureSharedCredentials,
	}
}

// sharedFiles are the credentials that make servers one kplane: the CA
// (every server's serving certificate is issued from it), the
// service-account signing key (a token minted by one is valid on all) and
// the static token file (the admin token).
func (c *Config) sharedFiles() join.Files {
	return join.Files{
		CACert: filepath.Join(c.TLSDir, "ca.crt"), CAKey: filepath.Join(c.TLSDir, "ca.key"),
		ServiceAccountKey: filepath.Join(c.TLSDir, "service-account.key"), Tokens: c.TokenFile,
	}
}

// ensureSharedCredentials creates those of the shared credentials the data
// dir lacks, as a first start does.
func (c *Config) ensureSharedCredentials() error {
	if _, err := credentials.EnsureCA(c.TLSDir); err != nil {
		return err
	}
	if _, err := credentials.EnsureSigningKey(filepath.Join(c.TLSDir, "service-account.key")); err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	_, err := credentials.EnsureTokenFile(c.TokenFile, c.Options.AdminToken)
	return err
}
