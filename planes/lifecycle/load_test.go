package lifecycle

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// A plane loaded by a request before the manager runs (Load, before every
// Plane is known) may already be being deleted, or held for another
// server's reset. Telling the other servers (drained, held) needs the
// running manager: it is left to the informer's look at the same Plane
// once the manager runs, and done once.
func TestDeletionToldOnceTheManagerRuns(t *testing.T) {
	m := observingManager()
	deleting := storedPlane()
	now := metav1.Now()
	deleting.SetDeletionTimestamp(&now)

	m.observe(deleting)
	if s := m.state["p"]; s == nil || !s.terminating || s.toldDeleting {
		t.Fatalf("loaded before the manager runs: %+v, want terminating and not told yet", s)
	}

	startEnded(m)
	m.observe(deleting)
	if s := m.state["p"]; !s.toldDeleting {
		t.Fatal("seen again once the manager runs: the deletion's drain was not started")
	}
}

func TestHoldToldOnceTheManagerRuns(t *testing.T) {
	m := observingManager()
	marked := storedPlane()
	marked.SetAnnotations(map[string]string{ResetAnnotation: resetMark{at: time.Now(), server: "s2"}.String()})

	m.observe(marked)
	if s := m.state["p"]; s == nil || !s.resetting || s.heldForMarkAt != 7 || s.toldHeldAt != 0 || m.held["p"] == nil {
		t.Fatalf("loaded before the manager runs: %+v, held %v; want held for the reset, not told yet", s, m.held["p"] != nil)
	}
	hold := m.held["p"]

	startEnded(m)
	m.observe(marked)
	if s := m.state["p"]; s.toldHeldAt != 7 || m.held["p"] != hold {
		t.Fatalf("seen again once the manager runs: told at %d, same hold %v; want told at 7 with the same hold", s.toldHeldAt, m.held["p"] == hold)
	}
}

// observingManager is a manager of server s1, sharing its datastore, that
// has not started running: what observe needs and nothing more.
func observingManager() *Manager {
	return &Manager{
		config:     Config{ServerName: "s1"},
		state:      map[string]*state{},
		dependents: map[string]map[string]struct{}{},
		held:       map[string]*resetHold{},
		requests:   newTracker(),
	}
}

// storedPlane is Plane p as the datastore holds it at resourceVersion 7.
func storedPlane() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetName("p")
	u.SetUID("uid-1")
	u.SetResourceVersion("7")
	return u
}

// startEnded makes m a running manager whose context has ended: what it
// starts for other servers returns at once without telling anyone.
func startEnded(m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.running.Store(&ctx)
}

// Before every Plane is known, a request to a plane not known yet loads
// its Plane, in front of authentication. One that presents no credentials
// goes straight on to authentication, which refuses it whatever its
// plane: an unauthenticated client cannot make the starting server read
// the datastore. (The manager here has no Planes' storage: a load answers
// 503.)
func TestLoadingReadsNothingWithoutCredentials(t *testing.T) {
	m := observingManager()
	m.observed = notYet{}
	m.config.Storage = &planestorage.Registry{}
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	refused := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	handler := m.Loading(refused, serializer.NewCodecFactory(scheme).WithoutConversion())

	for _, tc := range []struct {
		name          string
		authorization string
		want          int
	}{
		{"no credentials", "", http.StatusUnauthorized},
		{"a bearer token", "Bearer anything", http.StatusServiceUnavailable},
	} {
		req := httptest.NewRequestWithContext(planes.WithPlane(t.Context(), "p"), http.MethodGet, "/api/v1/namespaces", nil)
		if tc.authorization != "" {
			req.Header.Set("Authorization", tc.authorization)
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, w.Code, tc.want)
		}
	}
}

// notYet is an informer that has not seen every Plane.
type notYet struct{}

func (notYet) Name() string          { return "planes" }
func (notYet) Done() <-chan struct{} { return nil }
