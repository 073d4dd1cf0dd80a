package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"kplane.dev/kplane/test/e2e/framework"
)

func TestDurabilitySQLite(t *testing.T) {
	t.Parallel()
	durabilitySuite(t, nil)
}

func TestDurabilityEmbeddedEtcd(t *testing.T) {
	t.Parallel()
	durabilitySuite(t, []string{"--datastore-endpoint", "etcd"})
}

// durabilitySuite writes objects across 10 planes, kills the server with
// SIGKILL and restarts it: every acknowledged write is there, and a watch
// resumed from its last resourceVersion gets every later event, although
// the restarted server's watch caches begin after it.
func durabilitySuite(t *testing.T, args []string) {
	began := time.Now()
	s := framework.StartServer(t, framework.Options{Args: args})
	t.Logf("started in %s", time.Since(began))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const planes, perPlane = 10, 20
	planeName := func(i int) string { return fmt.Sprintf("durable-%d", i) }
	for i := 0; i < planes; i++ {
		c := s.Client(t, planeName(i))
		for j := 0; j < perPlane; j++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", j)},
				Data: map[string]string{"plane": planeName(i), "j": fmt.Sprint(j)}}
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create: %v", err)
			}
		}
	}
	// The root plane is no template's member: its watches take the
	// storage's other path, resumed the same way.
	rootWatched := s.Client(t, "root").CoreV1().ConfigMaps("default")
	beforeRoot, err := rootWatched.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-crash"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The last acknowledged write, right before the crash.
	watched := s.Client(t, planeName(0)).CoreV1().ConfigMaps("default")
	last, err := watched.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "last"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resumeFrom := last.ResourceVersion
	// A write of another plane after it: the restarted server's watch
	// caches start past resumeFrom, so the resumed watch below reaches
	// back beyond their history, as a watch resumed on a quiet plane of a
	// busy server does.
	if _, err := s.Client(t, planeName(1)).CoreV1().Secrets("default").Create(ctx,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Logf("wrote %d objects across %d planes at %s", planes*perPlane+1, planes, time.Since(began))
	s.Kill()
	t.Logf("killed at %s", time.Since(began))
	s.Restart(t)
	t.Logf("restarted at %s", time.Since(began))

	for i := 0; i < planes; i++ {
		list, err := s.Client(t, planeName(i)).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, cm := range list.Items {
			if cm.Data["plane"] == planeName(i) {
				n++
			} else if cm.Name != "last" && cm.Name != "kube-root-ca.crt" {
				t.Fatalf("plane %s holds %s of plane %q after restart", planeName(i), cm.Name, cm.Data["plane"])
			}
		}
		if n != perPlane {
			t.Fatalf("plane %s: %d of %d configmaps survived kill -9", planeName(i), n, perPlane)
		}
	}
	if _, err := watched.Get(ctx, "last", metav1.GetOptions{}); err != nil {
		t.Fatalf("last acknowledged write lost: %v", err)
	}

	// Writes after the restart, then a watch resumed from before the crash.
	for j := 0; j < 5; j++ {
		if _, err := watched.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("after-%d", j)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := watched.Delete(ctx, "cm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := watched.Watch(ctx, metav1.ListOptions{ResourceVersion: resumeFrom})
	if err != nil {
		t.Fatalf("resuming watch from %s: %v", resumeFrom, err)
	}
	defer w.Stop()
	var got []string
	timeout := time.After(framework.DefaultTimeout)
	for len(got) < 6 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("resumed watch closed after %v", got)
			}
			if ev.Type == watch.Error {
				t.Fatalf("resumed watch error: %v", ev.Object)
			}
			cm := ev.Object.(*corev1.ConfigMap)
			got = append(got, fmt.Sprintf("%s %s", ev.Type, cm.Name))
		case <-timeout:
			t.Fatalf("resumed watch got %v, want 5 ADDED and 1 DELETED", got)
		}
	}
	want := []string{"ADDED after-0", "ADDED after-1", "ADDED after-2", "ADDED after-3", "ADDED after-4", "DELETED cm-0"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("resumed watch: got %v, want %v", got, want)
		}
	}

	if err := rootWatched.Delete(ctx, "before-crash", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rw, err := rootWatched.Watch(ctx, metav1.ListOptions{ResourceVersion: beforeRoot.ResourceVersion,
		FieldSelector: "metadata.name=before-crash"})
	if err != nil {
		t.Fatalf("resuming the root plane's watch from %s: %v", beforeRoot.ResourceVersion, err)
	}
	defer rw.Stop()
	select {
	case ev, ok := <-rw.ResultChan():
		if !ok || ev.Type != watch.Deleted {
			t.Fatalf("resumed watch of the root plane: %v %v, want DELETED before-crash", ev.Type, ev.Object)
		}
	case <-time.After(framework.DefaultTimeout):
		t.Fatal("resumed watch of the root plane: no event, want DELETED before-crash")
	}
}

// TestDataDirInUse: a second server on a data dir in use refuses to start
// and leaves the first one serving.
func TestDataDirInUse(t *testing.T) {
	t.Parallel()
	bin, _ := framework.Binary()
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "server", "--data-dir", shared.DataDir, "--https-port", strconv.Itoa(port)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is in use by another kplane server") {
		t.Fatalf("second server on %s: %v\n%s", shared.DataDir, err, out)
	}
	if _, err := shared.Client(t, "root").CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("first server after the refused start: %v", err)
	}
}
