package join

import (
	"bytes"
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RecordKey is the datastore key of the record: beside the apiserver's
// /registry/ tree, so that no plane's deletion, reset or clone touches it.
const RecordKey = "/kplane/join/credentials"

// registryPrefix holds the apiserver's keys: any of them but kine's
// healthKey means a kplane has already served from the datastore.
const (
	registryPrefix = "/registry/"
	healthKey      = "/registry/health"
)

// timeout bounds the datastore calls of one join.
const timeout = 30 * time.Second

// Outcome says what a join did, for the start-up log.
type Outcome string

// The outcomes of Join.
const (
	// Stored: this server's credentials are now the datastore's record.
	Stored Outcome = "stored this server's credentials in the datastore, sealed with the join token"
	// Fetched: the data dir received the credentials from the record.
	Fetched Outcome = "joined: took the shared credentials from the datastore"
	// Matched: the data dir already held the record's credentials.
	Matched Outcome = "joined: the data dir holds the datastore's shared credentials"
)

// Joiner joins one server to the kplane of a datastore.
type Joiner struct {
	// KV is the datastore's etcd API.
	KV clientv3.KV
	// Token seals and opens the record; Version is this kplane's.
	Token, Version string
	// Issuer is this server's service-account issuer base URL, stored
	// when it is the first.
	Issuer string
	// DataDir names the data dir in errors; Files are its credentials.
	DataDir string
	Files   Files
	// Generate creates the credentials missing from Files, for a server
	// that is first on the datastore.
	Generate func() error
}

// Result is what a server joined with.
type Result struct {
	Outcome Outcome
	// ServiceAccountIssuer is the issuer base URL of every server.
	ServiceAccountIssuer string
}

// Join leaves Files holding the credentials every server of the datastore
// shares, or fails with one line and leaves an empty data dir empty: with
// the record's (a later server), or with this server's own, stored as the
// record (the first server; a data dir without a CA gets a new one).
func (j Joiner) Join(ctx context.Context) (Result, error) {
	outcome, issuer, err := j.join(ctx)
	return Result{Outcome: outcome, ServiceAccountIssuer: issuer}, err
}

// Adopt makes the data dir hold the credentials of record, a record
// fetched from a server of the kplane instead of read from the datastore
// (a member joining an embedded etcd cluster has no datastore yet). It
// refuses as Join does: a wrong token, another version, a data dir of
// another kplane.
func (j Joiner) Adopt(record []byte) (Result, error) {
	local, err := j.Files.Read()
	if err != nil {
		return Result{}, err
	}
	outcome, issuer, err := j.adopt(local, record, false)
	return Result{Outcome: outcome, ServiceAccountIssuer: issuer}, err
}

func (j Joiner) join(ctx context.Context) (Outcome, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	local, err := j.Files.Read()
	if err != nil {
		return "", "", err
	}
	record, found, err := j.get(ctx)
	if err != nil {
		return "", "", err
	}
	if found {
		return j.adopt(local, record, false)
	}
	fresh := len(local.CACert) == 0
	if fresh {
		if err := j.refuseUnsealedKplane(ctx); err != nil {
			return "", "", err
		}
	}
	if !local.complete() {
		if err := j.Generate(); err != nil {
			return "", "", err
		}
		if local, err = j.Files.Read(); err != nil {
			return "", "", err
		}
	}
	local.ServiceAccountIssuer = j.Issuer
	sealed, err := Seal(j.Token, j.Version, local)
	if err != nil {
		return "", "", fmt.Errorf("sealing the shared credentials: %w", err)
	}
	created, current, err := j.create(ctx, sealed)
	if err != nil || created {
		return Stored, j.Issuer, err
	}
	// Another server stored its record between our read and our create:
	// its credentials win; ours are replaced if we made them just now.
	return j.adopt(local, current, fresh)
}

// adopt makes the data dir hold the credentials of record. A data dir
// that holds another CA or signing key belongs to another kplane and is
// refused, unless replace (its credentials were made by this start). An
// existing token file is kept: an operator may have added tokens to it.
func (j Joiner) adopt(local Credentials, record []byte, replace bool) (Outcome, string, error) {
	shared, err := Open(j.Token, j.Version, record)
	if err != nil {
		return "", "", err
	}
	if !replace {
		if len(local.CACert) > 0 && !bytes.Equal(local.CACert, shared.CACert) {
			return "", "", fmt.Errorf("data dir %s holds another CA (%s) than the kplane of this datastore: it belongs to another kplane; join with an empty data dir", j.DataDir, j.Files.CACert)
		}
		if len(local.ServiceAccountKey) > 0 && !bytes.Equal(local.ServiceAccountKey, shared.ServiceAccountKey) {
			return "", "", fmt.Errorf("data dir %s holds another service-account signing key (%s) than the kplane of this datastore: it belongs to another kplane; join with an empty data dir", j.DataDir, j.Files.ServiceAccountKey)
		}
		if local.complete() {
			return Matched, shared.ServiceAccountIssuer, nil
		}
		if len(local.Tokens) > 0 {
			shared.Tokens = local.Tokens
		}
	}
	if err := j.Files.Write(shared); err != nil {
		return "", "", err
	}
	return Fetched, shared.ServiceAccountIssuer, nil
}

// refuseUnsealedKplane fails when the datastore already serves a kplane
// but holds no record: its servers run without a join token, and a new CA
// made here would split one datastore between two authorities.
func (j Joiner) refuseUnsealedKplane(ctx context.Context) error {
	resp, err := j.KV.Get(ctx, registryPrefix, clientv3.WithPrefix(), clientv3.WithLimit(2), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("reading the datastore: %w", err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Key) == healthKey {
			continue
		}
		return fmt.Errorf("the datastore already serves a kplane whose servers run without a join token: restart its first server with the same --join-token (it then stores its credentials), then start this one")
	}
	return nil
}

func (j Joiner) get(ctx context.Context) ([]byte, bool, error) {
	resp, err := j.KV.Get(ctx, RecordKey)
	if err != nil {
		return nil, false, fmt.Errorf("reading the shared credentials from the datastore: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}

// create stores record unless one exists (a create in etcd's and kine's
// sense: the key's mod revision is 0); when one does, it returns that one.
func (j Joiner) create(ctx context.Context, record []byte) (bool, []byte, error) {
	resp, err := j.KV.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(RecordKey), "=", 0)).
		Then(clientv3.OpPut(RecordKey, string(record))).
		Commit()
	if err != nil {
		return false, nil, fmt.Errorf("storing the shared credentials in the datastore: %w", err)
	}
	if resp.Succeeded {
		return true, nil, nil
	}
	current, found, err := j.get(ctx)
	if err != nil {
		return false, nil, err
	}
	if !found {
		return false, nil, fmt.Errorf("storing the shared credentials in the datastore: the record was there and is gone; start again")
	}
	return false, current, nil
}
