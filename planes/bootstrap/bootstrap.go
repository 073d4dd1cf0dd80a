package bootstrap

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/planes"
)

// SystemNamespaces exist in every plane.
var SystemNamespaces = []string{
	metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, "kube-node-lease",
}

// NamespaceStore is the part of the namespace registry bootstrap writes
// through.
type NamespaceStore interface {
	rest.Getter
	rest.Creater
}

// Bootstrapper ensures planes are bootstrapped.
type Bootstrapper struct {
	namespaces NamespaceStore

	known sync.Map // plane id -> struct{}
	group singleflight.Group
}

// New returns a Bootstrapper writing through the namespace registry.
func New(namespaces NamespaceStore) *Bootstrapper {
	return &Bootstrapper{namespaces: namespaces}
}

// Known reports whether plane was bootstrapped by this process.
func (b *Bootstrapper) Known(plane string) bool {
	_, ok := b.known.Load(plane)
	return ok
}

// Forget makes the next Ensure of plane bootstrap it again (after the plane
// was deleted).
func (b *Bootstrapper) Forget(plane string) { b.known.Delete(plane) }

// Ensure bootstraps plane unless this process already did. It returns once
// every bootstrap object exists.
func (b *Bootstrapper) Ensure(ctx context.Context, plane string) error {
	if b.Known(plane) {
		return nil
	}
	// The bootstrap is shared by every request waiting on it: a client that
	// gives up must not cancel it for the others.
	ch := b.group.DoChan(plane, func() (any, error) {
		// A fresh context: it carries the plane and nothing of the request
		// (no user, no namespace) that happened to trigger the bootstrap.
		bctx, cancel := context.WithTimeout(planes.WithPlane(genericapirequest.NewContext(), plane), 30*time.Second)
		defer cancel()
		if err := b.bootstrap(bctx); err != nil {
			return nil, fmt.Errorf("bootstrapping plane %q: %w", plane, err)
		}
		b.known.Store(plane, struct{}{})
		return nil, nil
	})
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Bootstrapper) bootstrap(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range SystemNamespaces {
		g.Go(func() error { return b.ensureNamespace(gctx, name) })
	}
	return g.Wait()
}

func (b *Bootstrapper) ensureNamespace(ctx context.Context, name string) error {
	if _, err := b.namespaces.Get(ctx, name, &metav1.GetOptions{ResourceVersion: "0"}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	ns := &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_, err := b.namespaces.Create(createContext(ctx, "namespaces", name), ns, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// createContext is what the registry expects to find in the context of a
// create that the API handler would otherwise have set up.
func createContext(ctx context.Context, resource, name string) context.Context {
	ctx = genericapirequest.WithNamespace(ctx, "")
	return genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: resource, Name: name,
	})
}
