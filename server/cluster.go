package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"kplane.dev/kplane/datastore"
	"kplane.dev/kplane/server/credentials"
	"kplane.dev/kplane/server/members"
	"kplane.dev/kplane/server/version"
)

// memberJoinTimeout bounds a member's start in an embedded etcd cluster:
// the join requests, the member's start and its promotion.
const memberJoinTimeout = 2 * time.Minute

// completeMember completes the config of a server whose embedded etcd is
// a member of a cluster (--cluster-init or --server): a new joiner first
// takes the shared credentials from --server and is added as a learner;
// then the member starts (the first member, a new joiner, or any member
// restarted on its data), a learner is promoted, and the credentials
// record is checked (or stored, by the first member's first start) through
// the member, as on any shared datastore.
func (c *Config) completeMember(ctx context.Context, lock *os.File) (CompletedConfig, error) {
	ctx, cancel := context.WithTimeout(ctx, memberJoinTimeout)
	defer cancel()
	member := c.member()
	joiner := c.membersJoiner()
	var added *members.AddResponse
	if c.Options.JoinServer != "" && !datastore.HasEmbeddedEtcd(c.DataDir) {
		resp, err := c.addMember(ctx, joiner, member)
		if err != nil {
			return CompletedConfig{}, fmt.Errorf("refusing to start: %w", err)
		}
		added = &resp
		member.InitialCluster = added.InitialCluster(member.Name, member.PeerURL())
	}
	completed, err := c.completeCredentials(lock)
	if err != nil {
		return CompletedConfig{}, err
	}
	store, err := c.listenDatastore(ctx, completed.EtcdTLS, &member)
	if err == nil && added != nil {
		// Said once it started: a refusal stays one line.
		logrus.WithField("member", added.ID).WithField("initialCluster", member.InitialCluster).Info("added to the embedded etcd cluster as a learner")
	}
	if err == nil && c.Options.JoinServer != "" {
		if err = promoteMember(ctx, joiner, store, completed.CA.PEM); err != nil {
			store.Close()
		}
	}
	if err != nil && added != nil {
		return CompletedConfig{}, fmt.Errorf("refusing to start: %w%s", err, c.abandonJoin(joiner, completed.CA.PEM, added.ID))
	}
	if err != nil {
		return CompletedConfig{}, fmt.Errorf("refusing to start: %w", err)
	}
	if err := advertisePeerURL(ctx, store, member); err != nil {
		store.Close()
		return CompletedConfig{}, fmt.Errorf("refusing to start: %w", err)
	}
	issuer, err := c.joinDatastore(ctx, store)
	if err != nil {
		store.Close()
		return CompletedConfig{}, err
	}
	completed.store, completed.ServiceAccountIssuer = store, issuer
	return completed, nil
}

// abandonJoin undoes a join that failed after its learner was added: the
// learner is removed and the member's data, which names it, emptied, so
// that the next start joins afresh. It says what it did, for the one line
// of the refusal.
func (c *Config) abandonJoin(joiner members.Joiner, caPEM []byte, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n, err := strconv.ParseUint(id, 16, 64)
	if err == nil {
		err = joiner.RemoveLearner(ctx, caPEM, n)
	}
	if err != nil {
		return fmt.Sprintf(" (its learner %s is still in the cluster: %v)", id, err)
	}
	if err := os.RemoveAll(filepath.Join(c.DataDir, "etcd", "data")); err != nil {
		return fmt.Sprintf(" (its learner %s was removed; emptying its data: %v)", id, err)
	}
	return fmt.Sprintf(" (its learner %s was removed from the cluster)", id)
}

// addMember trusts the cluster's CA, takes the shared credentials into
// the data dir and adds member as a learner: each step refuses before the
// next changes anything.
func (c *Config) addMember(ctx context.Context, joiner members.Joiner, member datastore.Member) (members.AddResponse, error) {
	caPEM, err := joiner.TrustCA(ctx)
	if err != nil {
		return members.AddResponse{}, err
	}
	record, err := joiner.Credentials(ctx, caPEM)
	if err != nil {
		return members.AddResponse{}, err
	}
	if _, err := c.credentialsJoiner().Adopt(record); err != nil {
		return members.AddResponse{}, err
	}
	if stored, err := os.ReadFile(c.sharedFiles().CACert); err != nil || !bytes.Equal(stored, caPEM) {
		return members.AddResponse{}, fmt.Errorf("the server %s signs another CA than its kplane's credentials hold", joiner.Server)
	}
	return joiner.Add(ctx, caPEM, members.AddRequest{Name: member.Name, PeerURL: member.PeerURL(), Version: version.Version})
}

// memberStatus returns a client of this server's embedded etcd member,
// which the caller closes, and the member's status.
func memberStatus(ctx context.Context, store *datastore.Datastore) (*clientv3.Client, *clientv3.StatusResponse, error) {
	client, err := store.Client()
	if err != nil {
		return nil, nil, err
	}
	status, err := client.Status(ctx, store.Endpoints[0])
	if err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("the embedded etcd member: %w", err)
	}
	return client, status, nil
}

// promoteMember asks the cluster to promote this server's member while it
// is a learner: a learner serves no client, so the apiserver must wait.
func promoteMember(ctx context.Context, joiner members.Joiner, store *datastore.Datastore, caPEM []byte) error {
	client, status, err := memberStatus(ctx, store)
	if err != nil {
		return err
	}
	defer client.Close()
	if !status.IsLearner {
		return nil
	}
	id := status.Header.MemberId
	if err := joiner.Promote(ctx, caPEM, id); err != nil {
		return fmt.Errorf("promoting the embedded etcd member %x: %w", id, err)
	}
	// The leader has promoted it; the member itself serves once it has
	// applied its promotion, a moment later.
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		status, err := client.Status(ctx, store.Endpoints[0])
		return err == nil && !status.IsLearner, nil
	})
	if err != nil {
		return fmt.Errorf("the embedded etcd member %x was promoted but still serves as a learner: %w", id, err)
	}
	logrus.WithField("member", fmt.Sprintf("%x", id)).Info("promoted to a voting member of the embedded etcd cluster")
	return nil
}

// advertisePeerURL makes the cluster reach this member at its configured
// peer URL: a member restarted with another --etcd-advertise-address or
// --etcd-peer-port, or a single embedded etcd (plain HTTP on loopback)
// restarted with --cluster-init, listens there already but the
// membership still names the old URL.
func advertisePeerURL(ctx context.Context, store *datastore.Datastore, member datastore.Member) error {
	client, status, err := memberStatus(ctx, store)
	if err != nil {
		return err
	}
	defer client.Close()
	list, err := client.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("listing the embedded etcd members: %w", err)
	}
	want := []string{member.PeerURL()}
	for _, m := range list.Members {
		if m.ID != status.Header.MemberId || slices.Equal(m.PeerURLs, want) {
			continue
		}
		if _, err := client.MemberUpdate(ctx, m.ID, want); err != nil {
			return fmt.Errorf("advertising the embedded etcd member's peer URL %s (was %v): %w", want[0], m.PeerURLs, err)
		}
		logrus.WithField("was", m.PeerURLs).WithField("now", want[0]).Info("the embedded etcd member's peer URL changed")
	}
	return nil
}

// member is this server's embedded etcd member of a cluster.
func (c *Config) member() datastore.Member {
	return datastore.Member{
		Name: c.Options.serverName(), PeerHost: c.Options.etcdAdvertiseAddress(), PeerPort: c.Options.EtcdPeerPort,
		PeerCertFile: filepath.Join(c.TLSDir, "etcd-peer.crt"), PeerKeyFile: filepath.Join(c.TLSDir, "etcd-peer.key"),
	}
}

// peerCertificate is the member's peer certificate: both ends of a peer
// connection present it, so it serves and authenticates a client.
func (c *Config) peerCertificate() credentials.Issued {
	m := c.member()
	leaf := credentials.Leaf{CommonName: datastore.EtcdPeerCommonName, Server: true, Client: true}
	if ip := net.ParseIP(m.PeerHost); ip != nil {
		leaf.IPs = []net.IP{ip}
	} else {
		leaf.DNSNames = []string{m.PeerHost}
	}
	return credentials.Issued{CertFile: m.PeerCertFile, KeyFile: m.PeerKeyFile, Leaf: leaf}
}

func (c *Config) membersJoiner() members.Joiner {
	return members.Joiner{Server: strings.TrimSuffix(c.Options.JoinServer, "/"), Token: c.JoinToken, Version: version.Version}
}
