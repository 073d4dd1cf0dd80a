package apiserver

import (
	"context"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/planes/bootstrap"
	"kplane.dev/kplane/planes/crds"
	planestorage "kplane.dev/kplane/planes/storage"
)

// Server is the multi-plane apiserver and the plane glue built around it.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
	Bootstrapper     *bootstrap.Bootstrapper
	Storage          *planestorage.Registry
	Core             *CoreRegistries
	CRDs             *crds.Server
}

// Run serves until ctx is done, then shuts down gracefully: it stops
// accepting requests and lets in-flight ones finish.
func (s *Server) Run(ctx context.Context) error {
	return s.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// lateBootstrapper lets the handler chain be built before the registries
// the bootstrapper writes through exist.
type lateBootstrapper struct {
	b atomic.Pointer[bootstrap.Bootstrapper]
}

func (l *lateBootstrapper) set(b *bootstrap.Bootstrapper) { l.b.Store(b) }

func (l *lateBootstrapper) Known(plane string) bool {
	b := l.b.Load()
	return b != nil && b.Known(plane)
}

func (l *lateBootstrapper) Ensure(ctx context.Context, plane string) error {
	b := l.b.Load()
	if b == nil {
		return apierrors.NewServiceUnavailable("the server is starting")
	}
	return b.Ensure(ctx, plane)
}

// namespaceGetter reads namespaces through the namespace registry.
type namespaceGetter struct{ registry rest.Getter }

func (g namespaceGetter) GetNamespace(ctx context.Context, name, resourceVersion string) (*api.Namespace, error) {
	obj, err := g.registry.Get(ctx, name, &metav1.GetOptions{ResourceVersion: resourceVersion})
	if err != nil {
		return nil, err
	}
	return obj.(*api.Namespace), nil
}
