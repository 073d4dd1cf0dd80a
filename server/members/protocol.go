package members

import (
	"strings"
)

// The paths every server of an embedded etcd cluster serves, below
// apiserver's public prefix /kplane/etcd/; each request carries the join
// token in TokenHeader (the Authorization header is the apiserver's).
const (
	CredentialsPath = "/kplane/etcd/credentials"
	MembersPath     = "/kplane/etcd/members"
	PromotePath     = "/kplane/etcd/promote"
	TokenHeader     = "Kplane-Join-Token"
)

// AddRequest asks to add a member.
type AddRequest struct {
	Name    string `json:"name"`
	PeerURL string `json:"peerURL"`
	// Version is the joiner's kplane version: another minor version is
	// refused before the cluster changes.
	Version string `json:"version"`
}

// Member is one member of the cluster.
type Member struct {
	Name     string   `json:"name"`
	PeerURLs []string `json:"peerURLs"`
}

// AddResponse is the added member and the members it starts with.
type AddResponse struct {
	// ID is the new member's ID (hex, as etcdctl prints it).
	ID      string   `json:"id"`
	Members []Member `json:"members"`
}

// CredentialsResponse carries the sealed credentials record.
type CredentialsResponse struct {
	Record []byte `json:"record"`
}

// PromoteRequest asks to make a learner a voting member.
type PromoteRequest struct {
	ID string `json:"id"`
}

// InitialCluster is the --initial-cluster a member named name, reached at
// peerURL, starts with: every member, the new one (not started, so
// unnamed) under its name.
func (r AddResponse) InitialCluster(name, peerURL string) string {
	var parts []string
	for _, m := range r.Members {
		memberName := m.Name
		for _, u := range m.PeerURLs {
			if u == peerURL {
				memberName = name
			}
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, memberName+"="+u)
		}
	}
	return strings.Join(parts, ",")
}
