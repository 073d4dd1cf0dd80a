package planeclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
)

// fakePlaneServer answers like the API for one Deployment: GET returns it
// at resourceVersion 2, a status PUT conflicts unless it carries 2.
func fakePlaneServer(t *testing.T, puts *atomic.Int32, seenPath *atomic.Value) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenPath.Store(r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		current := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","generation":1,"resourceVersion":"2"}}`
		switch r.Method {
		case http.MethodGet:
			_, _ = io.WriteString(w, current)
		case http.MethodPut:
			puts.Add(1)
			var obj map[string]any
			data, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(data, &obj); err != nil {
				t.Errorf("body: %v", err)
			}
			meta := obj["metadata"].(map[string]any)
			if meta["namespace"] != "default" {
				t.Errorf("namespace sent: %v", meta["namespace"])
			}
			if meta["resourceVersion"] != "2" {
				w.WriteHeader(http.StatusConflict)
				_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`)
				return
			}
			_, _ = w.Write(data)
		}
	}))
}

func TestStatusConflictReapplied(t *testing.T) {
	var puts atomic.Int32
	var seen atomic.Value
	srv := fakePlaneServer(t, &puts, &seen)
	defer srv.Close()
	cfg := Config(loopback.Routed(&rest.Config{Host: srv.URL}), nil, nil)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"p1|default","generation":1,"resourceVersion":"1"},"status":{"replicas":3}}`
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/apis/apps/v1/namespaces/p1%7Cdefault/deployments/web/status", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || puts.Load() != 2 {
		t.Fatalf("status %d after %d PUTs: %s", resp.StatusCode, puts.Load(), data)
	}
	if !strings.Contains(string(data), `"namespace":"p1|default"`) {
		t.Errorf("answer not folded: %s", data)
	}
	if got := seen.Load().(string); got != "/clusters/p1/control-plane/apis/apps/v1/namespaces/default/deployments/web/status" {
		t.Errorf("path sent: %s", got)
	}
}

// An Event whose object has no namespace (upstream's endpoints controller
// sends one) names no plane: client-go gets a BadRequest Status, which its
// event recorder does not retry, and nothing reaches the server; an Event
// in a folded namespace goes to its plane.
func TestPlanelessEventRefused(t *testing.T) {
	var puts atomic.Int32
	var seen atomic.Value
	seen.Store("")
	srv := fakePlaneServer(t, &puts, &seen)
	defer srv.Close()
	client, err := kubernetes.NewForConfig(Config(loopback.Routed(&rest.Config{Host: srv.URL}), nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Endpoints", Name: "web"}, Reason: "FailedToCreateEndpoint"}
	_, err = client.CoreV1().Events("default").Create(context.Background(), event, metav1.CreateOptions{})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "names no plane") {
		t.Fatalf("an event of no plane: want BadRequest, got %v", err)
	}
	if got := seen.Load().(string); got != "" {
		t.Fatalf("the event reached the server at %s", got)
	}
	event.Namespace = "p1|default"
	_, _ = client.CoreV1().Events("p1|default").Create(context.Background(), event, metav1.CreateOptions{})
	if got := seen.Load().(string); got != "/clusters/p1/control-plane/api/v1/namespaces/default/events" {
		t.Fatalf("an event of plane p1 went to %q", got)
	}
}

func TestEventWrites(t *testing.T) {
	for req, want := range map[string]bool{
		"POST /api/v1/namespaces/default/events":                     true,
		"PATCH /api/v1/namespaces/default/events/web.1":              true,
		"PUT /apis/events.k8s.io/v1/namespaces/default/events/web.1": true,
		"GET /api/v1/namespaces/default/events":                      false,
		"POST /api/v1/namespaces/events/pods":                        false,
		"PATCH /api/v1/namespaces/events/configmaps/events":          false,
		"DELETE /api/v1/namespaces/default/events/web.1":             false,
	} {
		method, path, _ := strings.Cut(req, " ")
		r, _ := http.NewRequest(method, "https://x"+path, nil)
		if got := isEventWrite(r); got != want {
			t.Errorf("isEventWrite(%s) = %v, want %v", req, got, want)
		}
	}
}

func TestDerivedStatusPaths(t *testing.T) {
	for path, want := range map[string]bool{
		"/apis/apps/v1/namespaces/default/deployments/web/status":                               true,
		"/clusters/p1/control-plane/apis/apps/v1/namespaces/default/replicasets/web/status":     true,
		"/clusters/p1/control-plane/apis/apps/v1/namespaces/default/statefulsets/db/status":     true,
		"/clusters/p1/control-plane/api/v1/namespaces/default/replicationcontrollers/rc/status": true,
		"/api/v1/namespaces/default/pods/web/status":                                            false,
		"/apis/batch/v1/namespaces/default/jobs/j/status":                                       false,
		"/apis/apps/v1/namespaces/default/deployments/web":                                      false,
	} {
		req, _ := http.NewRequest(http.MethodPut, "https://x"+path, nil)
		if got := derivedStatus(req); got != want {
			t.Errorf("derivedStatus(PUT %s) = %v, want %v", path, got, want)
		}
	}
}

// A DaemonSet's Pod names its node in its required node affinity: the
// name is unfolded with the namespace and nodeName, other fields are not.
func TestNodeNamesOfMatchFieldsUnfolded(t *testing.T) {
	body := `{"metadata":{"namespace":"p|default","labels":{"namespace":"p|x"}},"spec":{"nodeName":"p|kplane-node-1","affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["p|kplane-node-0"]},{"key":"spec.other","operator":"In","values":["p|kept"]}]}]}}}}}`
	out, err := rewrite(io.NopCloser(strings.NewReader(body)), func(s string) string { return strings.TrimPrefix(s, "p|") })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"namespace":"default"`, `"nodeName":"kplane-node-1"`, `"values":["kplane-node-0"]`, `"values":["p|kept"]`, `"namespace":"p|x"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rewritten body lacks %s:\n%s", want, out)
		}
	}
}

// refusingServer answers every request with status, at its code.
func refusingServer(t *testing.T, status *apierrors.StatusError) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(status.Status().Code))
		body := status.Status()
		body.Kind, body.APIVersion = "Status", "v1"
		if err := json.NewEncoder(w).Encode(body); err != nil {
			t.Error(err)
		}
	}))
}

// A plane being deleted (409) or already gone (404) is, to the
// controllers, a terminating namespace; other refusals stay what they are.
func TestPlaneBeingDeletedIsATerminatingNamespace(t *testing.T) {
	planesResource := schema.GroupResource{Group: lifecycle.GVR.Group, Resource: lifecycle.GVR.Resource}
	deleted := apierrors.NewConflict(planesResource, "p1", errors.New("the plane is being deleted"))
	gone := apierrors.NewNotFound(planesResource, "p1")
	exists := apierrors.NewAlreadyExists(schema.GroupResource{Resource: "pods"}, "web")
	noNamespace := apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "default")
	for _, tc := range []struct {
		answer      *apierrors.StatusError
		terminating bool
	}{{deleted, true}, {gone, true}, {exists, false}, {noNamespace, false}} {
		srv := refusingServer(t, tc.answer)
		client := kubernetes.NewForConfigOrDie(Config(loopback.Routed(&rest.Config{Host: srv.URL}), nil, nil))
		_, err := client.CoreV1().Pods("p1|default").Create(context.Background(),
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "p1|default"}}, metav1.CreateOptions{})
		srv.Close()
		if apierrors.ReasonForError(err) != tc.answer.Status().Reason {
			t.Fatalf("answer %v: error %v, want its reason %s", tc.answer, err, tc.answer.Status().Reason)
		}
		if got := apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause); got != tc.terminating {
			t.Errorf("answer %v: NamespaceTerminating cause %v, want %v (error %#v)", tc.answer, got, tc.terminating, err)
		}
	}
}

// versionedDeployment answers like the API for one Deployment whose
// resourceVersion moves with every write: a status PUT conflicts unless it
// carries the current resourceVersion.
type versionedDeployment struct {
	t                     *testing.T
	rv, generation        atomic.Int32
	puts, conflicts, gets atomic.Int32
}

func (d *versionedDeployment) object() string {
	return fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","generation":%d,"resourceVersion":"%d"}}`,
		d.generation.Load(), d.rv.Load())
}

func (d *versionedDeployment) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.Method {
	case http.MethodGet:
		d.gets.Add(1)
		_, _ = io.WriteString(w, d.object())
	case http.MethodPut:
		d.puts.Add(1)
		var obj struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		data, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(data, &obj); err != nil {
			d.t.Errorf("body: %v", err)
		}
		if obj.Metadata.ResourceVersion != strconv.Itoa(int(d.rv.Load())) {
			d.conflicts.Add(1)
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`)
			return
		}
		d.rv.Add(1)
		_, _ = io.WriteString(w, d.object())
	}
}

// A controller whose informer has not yet seen its own status write sends
// the next one with the resourceVersion the first was sent with: it goes
// out with the one the first produced, and no conflict, read or second
// write reaches the API. A change by anyone else still conflicts.
func TestStatusWriteCatchesUpWithItsOwnLastWrite(t *testing.T) {
	d := &versionedDeployment{t: t}
	d.rv.Store(1)
	d.generation.Store(1)
	srv := httptest.NewServer(d)
	defer srv.Close()
	client, err := rest.HTTPClientFor(Config(loopback.Routed(&rest.Config{Host: srv.URL}), nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	put := func(rv, generation int) int {
		body := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"p1|default","generation":%d,"resourceVersion":"%d"},"status":{"replicas":3}}`, generation, rv)
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/apis/apps/v1/namespaces/p1%7Cdefault/deployments/web/status", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		return resp.StatusCode
	}
	if code := put(1, 1); code != http.StatusOK {
		t.Fatalf("first status write: %d", code)
	}
	// The informer still holds resourceVersion 1.
	if code := put(1, 1); code != http.StatusOK {
		t.Fatalf("second status write from the same copy: %d", code)
	}
	if d.conflicts.Load() != 0 || d.gets.Load() != 0 || d.puts.Load() != 2 {
		t.Fatalf("the API saw %d PUTs, %d conflicts, %d GETs; want 2, 0, 0", d.puts.Load(), d.conflicts.Load(), d.gets.Load())
	}
	// Someone changes the spec: a status computed from the controller's
	// copy must not land.
	d.rv.Add(1)
	d.generation.Add(1)
	if code := put(2, 1); code != http.StatusConflict {
		t.Fatalf("status write after another writer's change: %d, want 409", code)
	}
}
