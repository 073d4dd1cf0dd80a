package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"kplane.dev/kplane/test/e2e/framework"
)

// inconsistentContinue is the message of upstream's 410 for a continue
// token whose revision was compacted (k8s.io/apiserver storage/etcd3).
const inconsistentContinue = "The provided continue parameter is too old to display a consistent list result. " +
	"You can start a new list without the continue parameter, or use the continue token in this response to " +
	"retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - " +
	"objects that were created, modified, or deleted between the time the first chunk was returned and now may " +
	"show up in the list."

// compactionInterval is short so that a token expires within seconds
// (upstream's spec waits up to two intervals of 5 minutes).
const compactionInterval = "2s"

func TestCompactionExpiresContinueTokenSQLite(t *testing.T) {
	t.Parallel()
	compactionSuite(t, nil)
}

func TestCompactionExpiresContinueTokenEmbeddedEtcd(t *testing.T) {
	t.Parallel()
	compactionSuite(t, []string{"--datastore-endpoint", "etcd"})
}

// compactionSuite: a list continue token answers 410 Expired with
// upstream's message once the datastore has been compacted past its
// revision, the token in that answer continues the list, and a kill -9
// after compactions loses no acknowledged write.
func compactionSuite(t *testing.T, args []string) {
	s := framework.StartServer(t, framework.Options{Args: append([]string{"--etcd-compaction-interval", compactionInterval}, args...)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const plane, ns, total = "chunks", "default", 25
	c := s.Client(t, plane)
	configMaps := c.CoreV1().ConfigMaps(ns)
	for i := 0; i < total; i++ {
		if _, err := configMaps.Create(ctx, chunkConfigMap(i, "v1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	first, err := configMaps.List(ctx, metav1.ListOptions{Limit: 10, LabelSelector: "chunk"})
	if err != nil || first.Continue == "" || len(first.Items) != 10 {
		t.Fatalf("first page: %v (continue %q, %d items)", err, first.Continue, len(first.Items))
	}
	// History for the compaction to remove: every object rewritten, some
	// deleted.
	for i := 0; i < total; i++ {
		cm := chunkConfigMap(i, "v2")
		if _, err := configMaps.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	began := time.Now()
	var expired *apierrors.StatusError
	eventually(t, time.Minute, "continue token expired", func() (bool, error) {
		_, err := configMaps.List(ctx, metav1.ListOptions{Limit: 10, LabelSelector: "chunk", Continue: first.Continue})
		if err == nil {
			return false, nil
		}
		se, ok := err.(*apierrors.StatusError)
		if !ok || !apierrors.IsResourceExpired(err) {
			t.Fatalf("continue with an old token: %v, want 410 Expired", err)
		}
		expired = se
		return true, nil
	})
	t.Logf("token expired %s after the updates (interval %s)", time.Since(began).Round(time.Millisecond), compactionInterval)
	if got := expired.ErrStatus; got.Code != 410 || got.Message != inconsistentContinue || got.Continue == "" {
		t.Fatalf("expired token answer: code %d, continue %q, message %q", got.Code, got.Continue, got.Message)
	}

	// The token of the answer continues where the first page ended, at the
	// newest revision (an inconsistent list, as upstream says).
	seen := pageThrough(t, ctx, configMaps, expired.ErrStatus.Continue, first.ResourceVersion)
	if len(seen) != total-10 {
		t.Fatalf("the inconsistent token gave %d more objects, want %d", len(seen), total-10)
	}
	for name, version := range seen {
		if version != "v2" {
			t.Fatalf("%s read as %s after the updates", name, version)
		}
	}

	survivesKillAfterCompaction(t, ctx, s, configMaps, total)
}

func chunkConfigMap(i int, version string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("chunk-%02d", i), Labels: map[string]string{"chunk": "yes"}},
		Data:       map[string]string{"version": version},
	}
}

// pageThrough lists from token to the end and returns name -> version. The
// pages must be at one revision, a newer one than staleRV.
func pageThrough(t *testing.T, ctx context.Context, configMaps typedcorev1.ConfigMapInterface, token, staleRV string) map[string]string {
	t.Helper()
	seen := map[string]string{}
	rv := ""
	for token != "" {
		page, err := configMaps.List(ctx, metav1.ListOptions{Limit: 10, LabelSelector: "chunk", Continue: token})
		if err != nil {
			t.Fatalf("continuing: %v", err)
		}
		if rv == "" {
			rv = page.ResourceVersion
		}
		if page.ResourceVersion != rv || rv == staleRV {
			t.Fatalf("page at resourceVersion %s (first %s, stale %s)", page.ResourceVersion, rv, staleRV)
		}
		for _, cm := range page.Items {
			seen[cm.Name] = cm.Data["version"]
		}
		token = page.Continue
	}
	return seen
}

// survivesKillAfterCompaction deletes and writes objects while the
// datastore compacts, kills the server with SIGKILL and checks every
// acknowledged write after the restart.
func survivesKillAfterCompaction(t *testing.T, ctx context.Context, s *framework.Server, configMaps typedcorev1.ConfigMapInterface, total int) {
	t.Helper()
	want := map[string]string{}
	for i := 0; i < total; i++ {
		name := chunkConfigMap(i, "").Name
		if i%3 == 0 {
			if err := configMaps.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := configMaps.Update(ctx, chunkConfigMap(i, "v3"), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want[name] = "v3"
	}
	// At least two more compactions pass over those writes: a token taken
	// now expires only once one has compacted past it.
	probe, err := configMaps.List(ctx, metav1.ListOptions{Limit: 1, LabelSelector: "chunk"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "a compaction after the last writes", func() (bool, error) {
		_, err := configMaps.List(ctx, metav1.ListOptions{Limit: 1, LabelSelector: "chunk", Continue: probe.Continue})
		return apierrors.IsResourceExpired(err), err
	})

	// The last acknowledged write, after the compactions.
	if _, err := configMaps.Create(ctx, chunkConfigMap(total, "last"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want[chunkConfigMap(total, "").Name] = "last"

	s.Kill()
	s.Restart(t)
	restarted := kubernetes.NewForConfigOrDie(s.RESTConfig("chunks")).CoreV1().ConfigMaps("default")
	list, err := restarted.List(ctx, metav1.ListOptions{LabelSelector: "chunk"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, cm := range list.Items {
		got[cm.Name] = cm.Data["version"]
	}
	if len(got) != len(want) {
		t.Fatalf("after kill -9: %d objects %v, want %d %v", len(got), got, len(want), want)
	}
	for name, version := range want {
		if got[name] != version {
			t.Fatalf("after kill -9: %s is %q, want %q", name, got[name], version)
		}
	}
	// The restarted server's watch caches begin after probe's revision,
	// which the datastore has compacted away: a watch from it is 410, as
	// upstream answers, not a watch that silently misses events.
	w, err := restarted.Watch(ctx, metav1.ListOptions{ResourceVersion: probe.ResourceVersion})
	if err == nil {
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			if status, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || status.Code != http.StatusGone {
				t.Fatalf("watch from compacted resourceVersion %s: first event %s %v, want a 410 error", probe.ResourceVersion, ev.Type, ev.Object)
			}
		case <-time.After(framework.DefaultTimeout):
			t.Fatalf("watch from compacted resourceVersion %s: no event, want a 410 error", probe.ResourceVersion)
		}
	} else if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from compacted resourceVersion %s: %v, want 410", probe.ResourceVersion, err)
	}
}
