package apiserver

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/fleet"
	"kplane.dev/kplane/planes/bootstrap"
	"kplane.dev/kplane/planes/crds"
	"kplane.dev/kplane/planes/lifecycle"
	planestorage "kplane.dev/kplane/planes/storage"
)

// Server is the multi-plane apiserver and the plane glue built around it.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
	Bootstrapper     *bootstrap.Bootstrapper
	Storage          *planestorage.Registry
	Core             *CoreRegistries
	CRDs             *crds.Server
	Planes           *lifecycle.Manager
	Fleets           *fleet.Controller
}

// Run serves until ctx is done, then shuts down gracefully: it stops
// accepting requests and lets in-flight ones finish.
func (s *Server) Run(ctx context.Context) error {
	return s.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// planeCensus is what the metrics read of the plane manager.
type planeCensus struct{ m *lifecycle.Manager }

// Phases counts the planes by phase.
func (p planeCensus) Phases() map[string]int {
	out := map[string]int{}
	for phase, n := range p.m.Phases() {
		out[string(phase)] = n
	}
	return out
}

// Exists reports whether plane exists.
func (p planeCensus) Exists(plane string) bool {
	_, ok := p.m.Phase(plane)
	return ok
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
