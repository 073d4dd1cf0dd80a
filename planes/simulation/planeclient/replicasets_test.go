package planeclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
)

func podTemplate(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: image}}},
	}
}

// The Deployment controller's create of a ReplicaSet for a pod template
// its Deployment no longer has (decided from an older copy, such as the
// one a reset just undid), or of a Deployment that cannot be read, is
// refused as a quiet retry and never reaches the API; the one for the
// current template, or for a Deployment that is gone, goes on, pinned to
// the plane's reset revision.
func TestReplicaSetOfAStaleTemplateRefused(t *testing.T) {
	current := appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: types.UID("d-1")},
		Spec:       appsv1.DeploymentSpec{Template: podTemplate("nginx")},
	}
	var creates atomic.Int32
	var pinned atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/clusters/p1/control-plane/apis/apps/v1/namespaces/default/deployments/web":
			_ = json.NewEncoder(w).Encode(current)
		case r.Method == http.MethodGet && r.URL.Path == "/clusters/p1/control-plane/apis/apps/v1/namespaces/default/deployments/held":
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`))
		case r.Method == http.MethodPost && r.URL.Path == "/clusters/p1/control-plane/apis/apps/v1/namespaces/default/replicasets":
			creates.Add(1)
			pinned.Store(r.Header.Get(lifecycle.ResetRevisionHeader))
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web-1","namespace":"default"}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
		}
	}))
	defer srv.Close()
	resets := func(plane string) uint64 {
		if plane != "p1" {
			t.Errorf("reset revision of plane %q read, want p1's", plane)
		}
		return 7
	}
	client := kubernetes.NewForConfigOrDie(Config(loopback.Routed(&rest.Config{Host: srv.URL}), nil, resets))
	create := func(owner, image string, uid types.UID) error {
		template := podTemplate(image)
		template.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "h"
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "web-h", Namespace: "p1|default", OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(&metav1.ObjectMeta{Name: owner, UID: uid}, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
			Spec: appsv1.ReplicaSetSpec{Template: template},
		}
		_, err := client.AppsV1().ReplicaSets("p1|default").Create(context.Background(), rs, metav1.CreateOptions{})
		return err
	}
	for _, tc := range []struct {
		what, owner, image string
		uid                types.UID
		refused            bool
	}{
		{"the current template", "web", "nginx", "d-1", false},
		{"a template the Deployment no longer has", "web", "nginx:1.27", "d-1", true},
		{"an earlier Deployment of the same name", "web", "nginx", "d-0", true},
		{"a Deployment that is gone", "gone", "nginx:1.27", "d-9", false},
		{"a Deployment whose read is refused (its plane is being reset)", "held", "nginx", "d-5", true},
	} {
		before := creates.Load()
		err := create(tc.owner, tc.image, tc.uid)
		reached := creates.Load() > before
		switch {
		case tc.refused && (!apierrors.IsConflict(err) || !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) || reached):
			t.Errorf("%s: error %v, reached the API %v; want a quiet conflict only", tc.what, err, reached)
		case !tc.refused && (err != nil || !reached):
			t.Errorf("%s: error %#v, reached the API %v; want it created", tc.what, err, reached)
		case reached && pinned.Load() != "7":
			t.Errorf("%s: created with reset revision %q, want the plane's, 7, read before the Deployment", tc.what, pinned.Load())
		}
	}
}
