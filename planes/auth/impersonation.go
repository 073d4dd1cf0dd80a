package auth

import (
	"context"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// ImpersonationGuard denies impersonating identities whose power reaches
// beyond one plane, to everyone who is not system:masters. It runs before
// the plane's RBAC: a plane's cluster-admin may impersonate any ordinary
// user, group or service account of its plane, but not these.
type ImpersonationGuard struct {
	// PrivilegedUsers are user names with server-wide power (the admin,
	// the loopback client).
	PrivilegedUsers []string
}

func (g ImpersonationGuard) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !strings.HasPrefix(a.GetVerb(), "impersonate") || isMaster(a.GetUser()) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	target := a.GetName()
	switch a.GetResource() {
	case "groups":
		if target == user.SystemPrivilegedGroup {
			return authorizer.DecisionDeny, "impersonating " + user.SystemPrivilegedGroup + " is reserved to the server administrators", nil
		}
	case "users":
		if target == user.APIServerUser || strings.HasPrefix(target, "system:kube-") {
			return authorizer.DecisionDeny, "impersonating " + target + " is reserved to the server administrators", nil
		}
		for _, u := range g.PrivilegedUsers {
			if target == u {
				return authorizer.DecisionDeny, "impersonating " + target + " is reserved to the server administrators", nil
			}
		}
	case "uids", "userextras":
		// Extras and UIDs cannot grant power by themselves; RBAC decides.
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func isMaster(u user.Info) bool {
	if u == nil {
		return false
	}
	for _, g := range u.GetGroups() {
		if g == user.SystemPrivilegedGroup {
			return true
		}
	}
	return false
}
