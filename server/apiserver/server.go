package apiserver

import (
	"context"
	"net/http"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/fleet"
	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/bootstrap"
	"kplane.dev/kplane/planes/crds"
	"kplane.dev/kplane/planes/lifecycle"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/snapshot"
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

// lateLifecycle lets the handler chain be built before the plane manager
// exists; until it does, planes other than root answer 503.
type lateLifecycle struct {
	m atomic.Pointer[lifecycle.Manager]
}

func (l *lateLifecycle) filter(next http.Handler, serializer runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if m := l.m.Load(); m != nil {
			m.Filter(next, serializer).ServeHTTP(w, req)
			return
		}
		if plane, _ := planes.FromContext(req.Context()); plane != planes.Root {
			responsewriters.ErrorNegotiated(apierrors.NewServiceUnavailable("the server is starting"), serializer,
				schema.GroupVersion{Version: "v1"}, w, req)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// phases counts the planes by phase (none until the manager exists).
func (l *lateLifecycle) phases() map[string]int {
	out := map[string]int{}
	if m := l.m.Load(); m != nil {
		for phase, n := range m.Phases() {
			out[string(phase)] = n
		}
	}
	return out
}

// exists reports whether plane exists (true until the manager exists: a
// counter is dropped only on the manager's word).
func (l *lateLifecycle) exists(plane string) bool {
	if m := l.m.Load(); m != nil {
		_, ok := m.Phase(plane)
		return ok
	}
	return true
}

// lateSnapshots lets the handler chain be built before the snapshot server
// exists; until it does, /snapshot is not found.
type lateSnapshots struct {
	s atomic.Pointer[snapshot.Server]
}

func (l *lateSnapshots) filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if s := l.s.Load(); s != nil {
			s.Filter(next).ServeHTTP(w, req)
			return
		}
		next.ServeHTTP(w, req)
	})
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
