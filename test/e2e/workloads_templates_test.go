package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestWorkloadsInTemplateMembers: a member's workloads inherited from its
// template move as its own: the controllers find the inherited ReplicaSet
// and Pods, scale and roll them out in the member alone, and a reset or
// the deletion of another member takes the member back to, or leaves it
// at, what it should be.
func TestWorkloadsInTemplateMembers(t *testing.T) {
	t.Parallel()
	s := shared
	tmpl := uniquePlane(t, "wl-tmpl")
	templateRunning(t, s, tmpl, 2)
	s.MustKubectl(t, tmpl, "", "expose", "deployment/web", "--port=80")
	ct := s.Client(t, tmpl)
	framework.Eventually(t, framework.DefaultTimeout, "the template's Service lists its 2 pods", func(ctx context.Context) error {
		if _, err := runningPods(ctx, ct, "default", "app=web", 2, "nginx"); err != nil {
			return err
		}
		return endpointsMatch(ctx, ct, "default", "web", "app=web")
	})
	a, b := uniquePlane(t, "wl-member-a"), uniquePlane(t, "wl-member-b")
	createPlane(t, s, a, tmpl)
	createPlane(t, s, b, tmpl)
	ca, cb := s.Client(t, a), s.Client(t, b)
	for plane, c := range map[string]kubernetes.Interface{a: ca, b: cb} {
		framework.Eventually(t, framework.DefaultTimeout, "member "+plane+" runs the 2 inherited pods", func(ctx context.Context) error {
			_, err := runningPods(ctx, c, "default", "app=web", 2, "nginx")
			return err
		})
	}

	s.MustKubectl(t, a, "", "scale", "deployment/web", "--replicas=4")
	rollout(t, s, a, "web")
	framework.Eventually(t, framework.DefaultTimeout, "member a: 4 pods, listed by its Service", func(ctx context.Context) error {
		if _, err := runningPods(ctx, ca, "default", "app=web", 4, "nginx"); err != nil {
			return err
		}
		return endpointsMatch(ctx, ca, "default", "web", "app=web")
	})
	s.MustKubectl(t, a, "", "set", "image", "deployment/web", "nginx=nginx:1.27")
	rollout(t, s, a, "web")
	framework.Eventually(t, framework.DefaultTimeout, "member a: 4 pods of nginx:1.27 in one ReplicaSet more", func(ctx context.Context) error {
		if _, err := runningPods(ctx, ca, "default", "app=web", 4, "nginx:1.27"); err != nil {
			return err
		}
		return replicaSets(ctx, ca, 2)
	})
	for plane, c := range map[string]kubernetes.Interface{tmpl: ct, b: cb} {
		if _, err := runningPods(t.Context(), c, "default", "app=web", 2, "nginx"); err != nil {
			t.Fatalf("plane %s changed with member a: %v", plane, err)
		}
		if err := replicaSets(t.Context(), c, 1); err != nil {
			t.Fatalf("plane %s: %v", plane, err)
		}
	}
	// Member b, left alone, wrote nothing: no controller made a Pod before
	// it saw the inherited ones (each would leave its events).
	if tEvents, bEvents := eventNames(t, ct), eventNames(t, cb); tEvents != bEvents {
		t.Fatalf("member b has events of its own:\ntemplate: %s\nmember:   %s", tEvents, bEvents)
	}

	t.Run("a fault in one member", func(t *testing.T) {
		setFaults(t, s, b, `[{"type": "CrashLoopBackOff", "match": {"image": "nginx"}}]`)
		framework.Eventually(t, framework.DefaultTimeout, "member b's inherited pods crash-loop", func(ctx context.Context) error {
			pods, err := cb.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if st := p.Status.ContainerStatuses; len(st) != 1 || st[0].RestartCount < 1 {
					return fmt.Errorf("pod %s: %+v", p.Name, st)
				}
			}
			if len(pods.Items) != 2 {
				return fmt.Errorf("%d pods", len(pods.Items))
			}
			return nil
		})
		if _, err := runningPods(t.Context(), ct, "default", "app=web", 2, "nginx"); err != nil {
			t.Fatalf("the template's pods changed with member b's fault: %v", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		if code := resetPlane(t, s, a); code != http.StatusOK {
			t.Fatalf("reset %s: HTTP %d", a, code)
		}
		framework.Eventually(t, framework.DefaultTimeout, "member a back to the template's 2 pods", func(ctx context.Context) error {
			if _, err := runningPods(ctx, ca, "default", "app=web", 2, "nginx"); err != nil {
				return err
			}
			return replicaSets(ctx, ca, 1)
		})
		// The controllers hold the inherited objects again: the member
		// moves from there as before.
		s.MustKubectl(t, a, "", "scale", "deployment/web", "--replicas=3")
		rollout(t, s, a, "web")
		framework.Eventually(t, framework.DefaultTimeout, "member a: 3 pods after the reset, listed by its Service", func(ctx context.Context) error {
			if _, err := runningPods(ctx, ca, "default", "app=web", 3, "nginx"); err != nil {
				return err
			}
			return endpointsMatch(ctx, ca, "default", "web", "app=web")
		})
	})
	t.Run("deleting a member", func(t *testing.T) {
		if out, err := kplaneCmd(t, s, "planes", "delete", b); err != nil {
			t.Fatalf("kplane planes delete: %v\n%s", err, out)
		}
		planes := s.Dynamic(t, "root").Resource(planeGVR)
		eventually(t, framework.DefaultTimeout, "plane "+b+" deleted", func() (bool, error) {
			_, err := planes.Get(t.Context(), b, metav1.GetOptions{})
			return gone(err)
		})
		s.MustKubectl(t, a, "", "scale", "deployment/web", "--replicas=1")
		rollout(t, s, a, "web")
		framework.Eventually(t, framework.DefaultTimeout, "member a: 1 pod", func(ctx context.Context) error {
			_, err := runningPods(ctx, ca, "default", "app=web", 1, "nginx")
			return err
		})
		// The same id again is a plane of its own, made from nothing.
		cb := s.Client(t, b)
		if l, err := cb.AppsV1().Deployments("").List(t.Context(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
			t.Fatalf("plane %s created again holds deployments (%v)", b, err)
		}
	})
}

// templateRunning makes plane tmpl, to be a template, with Deployment web
// of nginx rolled out to replicas Pods.
func templateRunning(t *testing.T, s *framework.Server, tmpl string, replicas int) {
	t.Helper()
	createPlane(t, s, tmpl, "")
	s.MustKubectl(t, tmpl, "", "create", "deployment", "web", "--image=nginx", fmt.Sprintf("--replicas=%d", replicas))
	rollout(t, s, tmpl, "web")
}

// replicaSets checks that the plane's Deployment web has want ReplicaSets:
// a controller that did not find an inherited one would make another.
func replicaSets(ctx context.Context, c kubernetes.Interface, want int) error {
	list, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		return err
	}
	if len(list.Items) != want {
		return fmt.Errorf("%d ReplicaSets of web, want %d", len(list.Items), want)
	}
	for _, rs := range list.Items {
		if !ownedByDeployment(&rs, "web") {
			return fmt.Errorf("ReplicaSet %s is not web's", rs.Name)
		}
	}
	return nil
}

func ownedByDeployment(rs *appsv1.ReplicaSet, name string) bool {
	for _, ref := range rs.OwnerReferences {
		if ref.Kind == "Deployment" && ref.Name == name {
			return true
		}
	}
	return false
}

// TestWorkloadsInTemplateMembersAfterRestart: after kill -9 and a restart
// the controllers' first list holds each member's inherited objects: the
// member's Deployment scales with the ReplicaSet it inherited.
func TestWorkloadsInTemplateMembersAfterRestart(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	tmpl, member := "wl-restart-tmpl", "wl-restart-member"
	templateRunning(t, s, tmpl, 2)
	createPlane(t, s, member, tmpl)
	s.Kill()
	s.Restart(t)
	s.MustKubectl(t, member, "", "scale", "deployment/web", "--replicas=3")
	rollout(t, s, member, "web")
	c := s.Client(t, member)
	framework.Eventually(t, framework.DefaultTimeout, "member: 3 pods of the inherited ReplicaSet", func(ctx context.Context) error {
		if _, err := runningPods(ctx, c, "default", "app=web", 3, "nginx"); err != nil {
			return err
		}
		return replicaSets(ctx, c, 1)
	})
}

// eventNames lists the names of the events in default, sorted.
func eventNames(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	list, err := c.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(list.Items))
	for _, e := range list.Items {
		names = append(names, e.Name)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// TestWorkloadsInFreshMembers: members changed the moment they exist,
// many at once, each still scale the ReplicaSet they inherited: no
// controller acts on a member before it holds what the member inherits.
func TestWorkloadsInFreshMembers(t *testing.T) {
	t.Parallel()
	s := shared
	tmpl := uniquePlane(t, "wl-fresh-tmpl")
	templateRunning(t, s, tmpl, 1)
	const members = 24
	names := make([]string, members)
	for i := range names {
		names[i] = uniquePlane(t, "wl-fresh")
	}
	planes := s.Dynamic(t, "root").Resource(planesGVR)
	// At once, as an RL harness starting its episodes does: each member is
	// changed as soon as its Plane is created.
	errs := make(chan error, members)
	scale := []byte(`{"spec":{"replicas":2}}`)
	for _, member := range names {
		c := s.Client(t, member)
		go func() {
			if _, err := planes.Create(t.Context(), newPlane(member, map[string]any{"template": tmpl}), metav1.CreateOptions{}); err != nil {
				errs <- err
				return
			}
			errs <- framework.WaitFor(t.Context(), framework.DefaultTimeout, func(ctx context.Context) error {
				_, err := c.AppsV1().Deployments("default").Patch(ctx, "web", types.MergePatchType, scale, metav1.PatchOptions{})
				return err
			})
		}()
	}
	for range members {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, member := range names {
		c := s.Client(t, member)
		framework.Eventually(t, framework.DefaultTimeout, "member "+member+": 2 pods of its one ReplicaSet", func(ctx context.Context) error {
			if _, err := runningPods(ctx, c, "default", "app=web", 2, "nginx"); err != nil {
				return err
			}
			return replicaSets(ctx, c, 1)
		})
	}
}

// TestWorkloadsResetUnderChurn: members that rolled out a new image and
// are reset at once, while other planes keep the controllers busy, each
// come back to their template's one ReplicaSet and Pods. A Deployment
// controller sync that read a member's changed Deployment just before its
// reset, and the reset's deletion of that spec's ReplicaSet, wrote the
// ReplicaSet again just after: the member kept two (seen in CI as
// TestWorkloadsInTemplateMembers/reset failing, and here in the second
// or third round of most runs on two loaded cores).
func TestWorkloadsResetUnderChurn(t *testing.T) {
	t.Parallel()
	s := shared
	tmpl := uniquePlane(t, "wl-churn-tmpl")
	templateRunning(t, s, tmpl, 2)
	members := make([]string, 8)
	for i := range members {
		members[i] = uniquePlane(t, "wl-churn-member")
		createPlane(t, s, members[i], tmpl)
	}
	ctx, stop := context.WithCancel(t.Context())
	var churning sync.WaitGroup
	defer churning.Wait()
	defer stop()
	for range 4 {
		plane := uniquePlane(t, "wl-churn")
		createPlane(t, s, plane, "")
		s.MustKubectl(t, plane, "", "create", "deployment", "web", "--image=nginx", "--replicas=1")
		c := s.Client(t, plane)
		churning.Go(func() { scaleAllAlong(ctx, c) })
	}
	for round := range 3 {
		image := fmt.Sprintf("nginx:1.%d", 20+round)
		var wg sync.WaitGroup
		for _, member := range members {
			c := s.Client(t, member)
			wg.Go(func() { rollOutAndReset(t, s, c, member, image) })
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for _, member := range members {
			c := s.Client(t, member)
			framework.Eventually(t, framework.DefaultTimeout, fmt.Sprintf("round %d: member %s back to the template's 2 pods", round, member), func(ctx context.Context) error {
				if _, err := runningPods(ctx, c, "default", "app=web", 2, "nginx"); err != nil {
					return err
				}
				return replicaSets(ctx, c, 1)
			})
		}
	}
}

// rollOutAndReset rolls member's Deployment web out to 3 Pods of image
// through c, then resets member. It reports failures with t.Errorf: it
// runs beside others.
func rollOutAndReset(t *testing.T, s *framework.Server, c kubernetes.Interface, member, image string) {
	patch := fmt.Sprintf(`{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"nginx","image":%q}]}}}}`, image)
	if _, err := c.AppsV1().Deployments("default").Patch(t.Context(), "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("rolling member %s out to %s: %v", member, image, err)
		return
	}
	err := framework.WaitFor(t.Context(), framework.DefaultTimeout, func(ctx context.Context) error {
		if _, err := runningPods(ctx, c, "default", "app=web", 3, image); err != nil {
			return err
		}
		return replicaSets(ctx, c, 2)
	})
	if err != nil {
		t.Errorf("member %s rolled out to %s: %v", member, image, err)
		return
	}
	if code, err := postReset(s, member); err != nil || code != http.StatusOK {
		t.Errorf("reset %s: HTTP %d, %v", member, code, err)
	}
}

// scaleAllAlong scales the plane's Deployment web between 1 and 4
// replicas until ctx is done: the controllers' informers and workers stay
// busy with every other plane's changes meanwhile.
func scaleAllAlong(ctx context.Context, c kubernetes.Interface) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, 1+n%4)
		_, _ = c.AppsV1().Deployments("default").Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{})
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
