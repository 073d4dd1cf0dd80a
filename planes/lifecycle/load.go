package lifecycle

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/auth"
)

// A server is ready before it knows every stored Plane: with 10,000 of
// them, reading and decoding the Planes' watch cache and observing each
// one took longer than the rest of the start together. Until every Plane
// is known, a request to a plane the manager has not seen yet loads that
// one Plane (and its templates') from the datastore, and what needs every
// plane waits for them all: a write (only the full set says whether the
// plane is the template of another, and so read-only), a reset, a plane
// not Ready (its bootstrap or clone), and the Planes' own admission
// (templates, dependents, --max-planes).

// loadTimeout bounds one Plane's read from the datastore.
const loadTimeout = 10 * time.Second

// maxTemplateDepth bounds the template chain Load follows; creation
// refuses cycles, this only keeps a corrupt chain from looping.
const maxTemplateDepth = 16

// Load makes plane known to the manager before every stored Plane is:
// its Plane is read from the datastore and observed as the informer would,
// then its template's, and so on up the chain (each one not known yet:
// a load that failed half-way is finished by the next). It does nothing
// once every Plane is known; a plane with no Plane stays unknown (its
// request decides: 404 or provisioning).
func (m *Manager) Load(ctx context.Context, plane string) error {
	for depth := 0; plane != "" && plane != planes.Root && depth < maxTemplateDepth; depth++ {
		if m.HasSynced() {
			return nil
		}
		if !m.Exists(plane) {
			found, err := m.loadOne(ctx, plane)
			if err != nil || !found {
				return err
			}
		}
		plane = m.TemplateOf(plane)
	}
	return nil
}

// loadOne reads and observes one Plane, once for all the requests that
// ask for it at the same moment; found is false when none is stored.
func (m *Manager) loadOne(ctx context.Context, plane string) (found bool, err error) {
	v, err, _ := m.loads.Do(plane, func() (any, error) {
		if m.Exists(plane) {
			return true, nil
		}
		// Shared by every request waiting for it: not ended by the first
		// one's client going away.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadTimeout)
		defer cancel()
		u, err := m.readPlane(ctx, plane)
		switch {
		case storage.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, err
		}
		m.mu.Lock()
		if m.loaded != nil {
			m.loaded[plane] = u
		}
		m.mu.Unlock()
		m.observe(u)
		return true, nil
	})
	if err != nil {
		return false, fmt.Errorf("loading plane %s: %w", plane, err)
	}
	return v.(bool), nil
}

// Object returns plane's Plane as the manager last saw it: the informer's
// copy, or before every Plane is known the one Load read. Read it, never
// modify it.
func (m *Manager) Object(plane string) (*unstructured.Unstructured, bool) {
	if obj, found, err := m.informer.GetStore().GetByKey(plane); err == nil && found {
		u, ok := obj.(*unstructured.Unstructured)
		return u, ok
	}
	if m.HasSynced() {
		return nil, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	u, ok := m.loaded[plane]
	return u, ok
}

// WaitForPlanes returns once every stored Plane is known, or with ctx's
// error.
func (m *Manager) WaitForPlanes(ctx context.Context) error {
	select {
	case <-m.observed.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting until every stored plane is known: %w", ctx.Err())
	}
}

// Loading is the filter, in front of authentication, that loads a
// request's plane while not every Plane is known: authentication (a
// service account token), authorization (the plane's RBAC) and the
// storage read a member plane's objects through its template, which only
// the plane's Plane names. A request that presents no credentials is
// refused by authentication whatever its plane (only root serves public
// paths): it reads nothing from the datastore.
func (m *Manager) Loading(next http.Handler, serializer runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !m.HasSynced() && auth.HasCredentials(req) {
			if plane, ok := planes.FromContext(req.Context()); ok {
				if err := m.Load(req.Context(), plane); err != nil {
					// Not authenticated yet: the datastore's error goes to
					// the log, not to the client.
					logrus.WithError(err).WithField("plane", plane).Warn("Loading a plane for a request")
					writeError(w, req, serializer, apierrors.NewServiceUnavailable("the server is loading its planes; retry"))
					return
				}
			}
		}
		next.ServeHTTP(w, req)
	})
}

// needsEveryPlane reports whether req, to a plane in phase, must wait
// until every stored Plane is known: anything but a read of a Ready plane.
func needsEveryPlane(req *http.Request, phase Phase) bool {
	if phase != Ready || req.URL.Path == ResetPath {
		return true
	}
	info, ok := request.RequestInfoFrom(req.Context())
	if !ok || !info.IsResourceRequest {
		return req.Method != http.MethodGet && req.Method != http.MethodHead
	}
	switch info.Verb {
	case "get", "list", "watch":
		return false
	}
	return true
}
