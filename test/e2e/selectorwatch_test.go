package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestSelectorWatchFromResourceVersion: watches with a field or label
// selector that start from a resourceVersion tell every change, in a plane
// made from nothing (a layer over the base plane) and in a template's
// member alike. (kubectl delete --wait and kubectl wait watch this way.)
func TestSelectorWatchFromResourceVersion(t *testing.T) {
	t.Parallel()
	s := shared
	tmpl := uniquePlane(t, "selwatch-tmpl")
	createPlane(t, s, tmpl, "")
	member := uniquePlane(t, "selwatch-member")
	createPlane(t, s, member, tmpl)
	for _, plane := range []string{uniquePlane(t, "selwatch"), member} {
		c := s.Client(t, plane)
		ctx := context.Background()
		cm, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		byName, err := c.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=watched", ResourceVersion: cm.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		byLabel, err := c.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{LabelSelector: "tier=web", ResourceVersion: cm.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().ConfigMaps("default").Patch(ctx, "watched", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"web"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.CoreV1().ConfigMaps("default").Delete(ctx, "watched", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		expectEvents(t, plane+" field selector", byName, watch.Modified, watch.Deleted)
		expectEvents(t, plane+" label selector", byLabel, watch.Added, watch.Deleted)
	}
}

func expectEvents(t *testing.T, what string, w watch.Interface, want ...watch.EventType) {
	t.Helper()
	defer w.Stop()
	var got []watch.EventType
	deadline := time.After(framework.DefaultTimeout)
	for len(got) < len(want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("%s: watch ended after %v, want %v", what, got, want)
			}
			got = append(got, ev.Type)
		case <-deadline:
			t.Fatalf("%s: events %v after %s, want %v", what, got, framework.DefaultTimeout, want)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: events %v, want %v", what, got, want)
	}
}
