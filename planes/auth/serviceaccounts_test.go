package auth

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	api "k8s.io/kubernetes/pkg/apis/core"
	// The internal-to-v1 conversions the getter uses.
	_ "k8s.io/kubernetes/pkg/apis/core/install"
)

// lagging is a storage whose cache has not yet seen one object the
// datastore holds.
type lagging struct {
	stored *api.ServiceAccount
	reads  []string
}

func (l *lagging) Get(_ context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	l.reads = append(l.reads, opts.ResourceVersion)
	if opts.ResourceVersion == "0" || l.stored == nil || l.stored.Name != name {
		return nil, apierrors.NewNotFound(corev1.Resource("serviceaccounts"), name)
	}
	return l.stored, nil
}

func TestServiceAccountReadFallsBackToTheDatastore(t *testing.T) {
	stored := &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "default", UID: "u1"}}
	g := &lagging{stored: stored}
	getter := &tokenGetter{regs: ServiceAccountRegistries{ServiceAccounts: g}}
	sa, err := getter.GetServiceAccount(context.Background(), "default", "new")
	if err != nil {
		t.Fatalf("a service account the cache has not seen yet: %v", err)
	}
	if sa.UID != "u1" {
		t.Errorf("read %q, want uid u1", sa.UID)
	}
	if len(g.reads) != 2 || g.reads[0] != "0" || g.reads[1] != "" {
		t.Errorf("reads %q, want the cache then a consistent read", g.reads)
	}

	g.reads = nil
	if _, err := getter.GetServiceAccount(context.Background(), "default", "gone"); !apierrors.IsNotFound(err) {
		t.Errorf("a service account the datastore does not hold: %v, want NotFound", err)
	}
}
