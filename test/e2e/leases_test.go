package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"kplane.dev/kplane/test/e2e/framework"
)

// The Leases of the work one server at a time runs (server/leader).
var controllerLeases = []string{"kplane-planes", "kplane-controllers", "kplane-simulation"}

// leaseTakeover is the longest a dead holder's work may wait for another
// server: the Lease's duration (10 s), one retry (up to 2.2 s), and
// polling and a loaded machine's delays.
const leaseTakeover = 15 * time.Second

// startServersOnEtcd starts n servers named s1..sn on one external etcd,
// joined with one token.
func startServersOnEtcd(t *testing.T, n int, args ...string) []*framework.Server {
	t.Helper()
	endpoint := framework.StartEtcd(t)
	token := framework.NewJoinToken(t)
	servers := make([]*framework.Server, n)
	for i := range servers {
		servers[i] = framework.StartServer(t, framework.Options{Args: append([]string{"--datastore-endpoint", endpoint,
			"--join-token", token, "--server-name", fmt.Sprintf("s%d", i+1)}, args...)})
	}
	return servers
}

// startEmbeddedEtcdCluster starts n servers named s1..sn forming one
// embedded etcd cluster: the first with --cluster-init, the others
// joining it with one token, each with a peer port of its own.
func startEmbeddedEtcdCluster(t *testing.T, n int) []*framework.Server {
	t.Helper()
	token := framework.NewJoinToken(t)
	servers := make([]*framework.Server, n)
	for i := range servers {
		args := []string{"--datastore-endpoint", "etcd", "--join-token", token,
			"--server-name", fmt.Sprintf("s%d", i+1)}
		if i == 0 {
			args = append(args, "--cluster-init")
		} else {
			args = append(args, "--server", servers[0].URL)
		}
		servers[i] = framework.StartServer(t, framework.Options{Args: args, PortFlags: []string{"--etcd-peer-port"}})
		removeWhenPassed(t, servers[i])
	}
	return servers
}

// leaseHolder reads the holder of a Lease through s ("" if none).
func leaseHolder(ctx context.Context, s *framework.Server, t *testing.T, lease string) (string, error) {
	l, err := s.Client(t, "root").CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// leaderMetrics reads kplane_controllers_leader of s: controllers -> value.
func leaderMetrics(t *testing.T, s *framework.Server) (map[string]string, error) {
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.AdminToken())
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range leaderLine.FindAllStringSubmatch(string(body), -1) {
		out[m[1]] = m[2] + "=" + m[3]
	}
	return out, nil
}

var leaderLine = regexp.MustCompile(`(?m)^kplane_controllers_leader\{controllers="([^"]+)",server="([^"]+)"\} (\d)`)

// requireHolders waits until, for every Lease, its holder is one of
// servers, its metric says 1 there and 0 on the others, and (when want
// names one) the holder is want. It returns the holders by Lease.
func requireHolders(t *testing.T, servers map[string]*framework.Server, want string) map[string]string {
	t.Helper()
	holders := map[string]string{}
	framework.Eventually(t, framework.DefaultTimeout, "one live holder of every Lease", func(ctx context.Context) error {
		var any *framework.Server
		for _, s := range servers {
			any = s
		}
		for _, lease := range controllerLeases {
			holder, err := leaseHolder(ctx, any, t, lease)
			if err != nil {
				return err
			}
			if _, live := servers[holder]; !live || (want != "" && holder != want) {
				return fmt.Errorf("Lease %s held by %q", lease, holder)
			}
			holders[lease] = holder
		}
		for name, s := range servers {
			got, err := leaderMetrics(t, s)
			if err != nil {
				return err
			}
			for _, lease := range controllerLeases {
				value := "0"
				if holders[lease] == name {
					value = "1"
				}
				if got[lease] != name+"="+value {
					return fmt.Errorf("%s: kplane_controllers_leader of %s is %q, want %s=%s", name, lease, got[lease], name, value)
				}
			}
		}
		return nil
	})
	return holders
}

// TestControllersMoveWhenLeaderDies: three servers on one etcd pass the
// isolation suite through a round-robin of them; the first runs every
// controller. It is killed (-9) while it provisions a Fleet of 100 and
// while a namespace deletion waits on a finalizer: another server takes
// the Leases within 15 s, the Fleet converges to exactly its 100 members
// (those created before the kill are the same Planes), the deletion
// completes and the leader metric moves. Then the new leader hangs
// (SIGSTOP) past its Lease: the third server takes over, and the resumed
// one stops its controllers and keeps serving; when the third stops, the
// resumed one runs the controllers again.
func TestControllersMoveWhenLeaderDies(t *testing.T) {
	t.Parallel()
	all := startServersOnEtcd(t, 3)
	byName, leader := controllersMoveWhenFirstDies(t, all)
	const plane = "handover"
	ctx := context.Background()
	two, three := all[1], all[2]

	// The lifecycle's holder hangs past its Lease: the other server takes
	// every Lease; resumed, the hung one runs nothing and still serves.
	hung, other := two, three
	otherName := "s3"
	if leader == "s3" {
		hung, other, otherName = three, two, "s2"
	}
	hung.Pause(t)
	t.Cleanup(func() { hung.Resume(t) })
	framework.Eventually(t, leaseTakeover+framework.DefaultTimeout, otherName+" holding the Leases", func(ctx context.Context) error {
		for _, lease := range controllerLeases {
			if holder, err := leaseHolder(ctx, other, t, lease); err != nil || holder != otherName {
				return fmt.Errorf("%s held by %q (%v)", lease, holder, err)
			}
		}
		return nil
	})
	hung.Resume(t)
	requireHolders(t, byName, otherName)
	if _, err := hung.Client(t, plane).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("the server that lost the Leases no longer serves: %v", err)
	}
	if !strings.Contains(hung.Log(), "lease lost or released") {
		t.Fatalf("the server that lost the Leases did not stop its controllers; log:\n%s", hung.Log())
	}

	// The holder stops (and releases): the resumed server runs the
	// controllers again, afresh.
	other.Stop()
	delete(byName, otherName)
	requireHolders(t, byName, leader)
	ch := hung.Client(t, plane)
	if _, err := ch.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "again"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "the default ServiceAccount of namespace again", func(ctx context.Context) error {
		_, err := ch.CoreV1().ServiceAccounts("again").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	if err := ch.CoreV1().Namespaces().Delete(ctx, "again", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, framework.DefaultTimeout, "namespace again", func() error {
		_, err := ch.CoreV1().Namespaces().Get(ctx, "again", metav1.GetOptions{})
		return err
	})
}

// TestControllersMoveWhenLeaderDiesEmbeddedEtcd: the same on three
// servers forming one embedded etcd cluster, the killed first server
// being one of its three members: the two others keep quorum and take
// its work. (A hung second server would leave one member of three: the
// SIGSTOP half runs on external etcd only.)
func TestControllersMoveWhenLeaderDiesEmbeddedEtcd(t *testing.T) {
	t.Parallel()
	controllersMoveWhenFirstDies(t, startEmbeddedEtcdCluster(t, 3))
}

// controllersMoveWhenFirstDies runs the isolation suite through a
// round-robin of all, then kills the first of them, which holds every
// Lease, while it provisions a Fleet of 100 and a namespace deletion
// waits: the others take over, finish both and do nothing twice. It
// returns the live servers by name and the holder of the planes' Lease.
func controllersMoveWhenFirstDies(t *testing.T, all []*framework.Server) (map[string]*framework.Server, string) {
	t.Helper()
	byName := map[string]*framework.Server{"s1": all[0], "s2": all[1], "s3": all[2]}
	requireHolders(t, byName, "s1")
	t.Run("isolation-round-robin", func(t *testing.T) {
		servers := framework.NewRoundRobin(all...)
		isolationSuite(t, servers)
		if sent := servers.Sent(); slices.Min(sent) == 0 {
			t.Fatalf("requests per server %v: not a round-robin", sent)
		}
	})
	ctx := context.Background()
	one := all[0]

	// A namespace whose deletion waits on a finalizer nobody removes yet.
	const plane = "handover"
	createPlane(t, one, plane, "")
	c1 := one.Client(t, plane)
	if _, err := c1.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}
	if _, err := c1.CoreV1().ConfigMaps("doomed").Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	fleets := one.Dynamic(t, "root").Resource(fleetGVR)
	f := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kplane.dev/v1", "kind": "Fleet", "metadata": map[string]any{"name": "moving"},
		"spec": map[string]any{"replicas": int64(100), "deletionPolicy": "Delete"},
	}}
	if _, err := fleets.Create(ctx, f, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "first members of moving", func(context.Context) error {
		if n := len(memberPlanes(t, one, "moving")); n < 5 {
			return fmt.Errorf("%d members", n)
		}
		return nil
	})
	if err := c1.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "the held ConfigMap being deleted", func(ctx context.Context) error {
		cm, err := c1.CoreV1().ConfigMaps("doomed").Get(ctx, "held", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.DeletionTimestamp == nil {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	before := memberUIDs(t, one, "moving")
	one.Kill()
	killed := time.Now()
	t.Logf("s1 killed with %d/100 members created", len(before))
	if len(before) == 100 {
		t.Log("every member existed before the kill: the takeover still has to make them ready")
	}
	delete(byName, "s1")
	two, three := all[1], all[2]

	// The Leases move within the takeover bound (each to either server).
	framework.Eventually(t, leaseTakeover+5*time.Second, "other servers holding the Leases", func(ctx context.Context) error {
		for _, lease := range controllerLeases {
			holder, err := leaseHolder(ctx, two, t, lease)
			if err != nil {
				return err
			}
			if holder != "s2" && holder != "s3" {
				return fmt.Errorf("%s held by %q", lease, holder)
			}
		}
		return nil
	})
	took := time.Since(killed)
	holders := requireHolders(t, byName, "")
	leader := holders["kplane-planes"]
	t.Logf("the Leases moved %.1f s after the kill: %v", took.Seconds(), holders)
	if took > leaseTakeover {
		t.Fatalf("takeover took %s, want at most %s", took, leaseTakeover)
	}

	// The namespace deletion begun on s1 completes once its finalizer goes.
	c2 := two.Client(t, plane)
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := c2.CoreV1().ConfigMaps("doomed").Patch(ctx, "held", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, framework.DefaultTimeout, "namespace doomed", func() error {
		_, err := three.Client(t, plane).CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return err
	})

	// The Fleet converges to exactly its 100 members, the early ones kept.
	waitFleet(t, two.Dynamic(t, "root").Resource(fleetGVR), "moving", 2*framework.DefaultTimeout, "100/100 ready after the kill",
		func(st fleetStatus) bool { return st.ready == 100 })
	after := memberUIDs(t, two, "moving")
	if got, want := len(after), 100; got != want {
		t.Fatalf("%d members after the takeover, want %d", got, want)
	}
	for name, uid := range before {
		if after[name] != uid {
			t.Fatalf("member %s was created again (uid %s before the kill, %s after)", name, uid, after[name])
		}
	}
	out, err := kplaneCmd(t, two, "planes", "list")
	if err != nil || !regexp.MustCompile(`(?m)^moving-0099\s+Ready\s+\d+\s+`+leader+`\s`).MatchString(out) {
		t.Fatalf("kplane planes list does not name %s as OWNER of moving-0099 (%v):\n%s", leader, err, out)
	}
	return byName, leader
}

// memberUIDs are the uids of fleet's member Planes by name.
func memberUIDs(t *testing.T, s *framework.Server, fleet string) map[string]types.UID {
	t.Helper()
	list, err := s.Dynamic(t, "root").Resource(planeGVR).List(context.Background(),
		metav1.ListOptions{LabelSelector: "kplane.dev/fleet=" + fleet})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, p := range list.Items {
		out[p.GetName()] = p.GetUID()
	}
	return out
}

// TestMaxPlanesAcrossServers: --max-planes counts the planes of every
// server on the datastore: twelve Planes created at once through two
// servers with --max-planes 4 leave exactly four, the others refused with
// 403 naming the limit; a deleted plane frees its place on the other
// server.
func TestMaxPlanesAcrossServers(t *testing.T) {
	t.Parallel()
	servers := startServersOnEtcd(t, 2, "--max-planes", "4", "--simulation=false")
	ctx := context.Background()
	const n = 12
	errs := make([]error, n)
	done := make(chan int, n)
	for i := range n {
		go func() {
			p := newPlane(fmt.Sprintf("cap-%d", i), nil)
			_, errs[i] = servers[i%2].Dynamic(t, "root").Resource(planeGVR).Create(ctx, p, metav1.CreateOptions{})
			done <- i
		}()
	}
	for range n {
		<-done
	}
	created := 0
	for i, err := range errs {
		switch {
		case err == nil:
			created++
		case !strings.Contains(err.Error(), "plane limit reached") || !strings.Contains(err.Error(), "--max-planes"):
			t.Fatalf("cap-%d: want created or 403 naming --max-planes, got %v", i, err)
		}
	}
	if created != 4 {
		t.Fatalf("%d of %d Planes created through two servers with --max-planes 4, want 4", created, n)
	}
	for _, s := range servers {
		list, err := s.Dynamic(t, "root").Resource(planeGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(list.Items) - 1; got != 4 { // root is a Plane too
			t.Fatalf("%d planes stored, want 4", got)
		}
	}
	var victim string
	for i, err := range errs {
		if err == nil {
			victim = fmt.Sprintf("cap-%d", i)
			break
		}
	}
	if err := servers[0].Dynamic(t, "root").Resource(planeGVR).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "a plane in the freed place, through the other server", func(ctx context.Context) error {
		_, err := servers[1].Dynamic(t, "root").Resource(planeGVR).Create(ctx, newPlane("cap-again", nil), metav1.CreateOptions{})
		return err
	})
}

// TestSoleServerLeasesWrittenOnce: a server on SQLite is alone on its
// datastore by construction: it runs its work at once and writes each
// Lease once, naming itself (no renewal every second for the server's
// life), and hands it to its next start after kill -9.
func TestSoleServerLeasesWrittenOnce(t *testing.T) {
	s := framework.StartServer(t, framework.Options{Args: []string{"--server-name", "alone"}})
	ctx := context.Background()
	leases := s.Client(t, "root").CoordinationV1().Leases("kube-system")
	check := func(ctx context.Context) error {
		for _, name := range controllerLeases {
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			spec := l.Spec
			if spec.HolderIdentity == nil || *spec.HolderIdentity != "alone" {
				return fmt.Errorf("lease %s held by %v", name, spec.HolderIdentity)
			}
			// Held for good (until the next start), never renewed.
			if spec.LeaseDurationSeconds == nil || *spec.LeaseDurationSeconds < 1<<30 {
				return fmt.Errorf("lease %s expires: %v s", name, spec.LeaseDurationSeconds)
			}
			if spec.RenewTime == nil || spec.AcquireTime == nil || !spec.RenewTime.Equal(spec.AcquireTime) {
				return fmt.Errorf("lease %s renewed: acquired %v, renewed %v", name, spec.AcquireTime, spec.RenewTime)
			}
		}
		m, err := leaderMetrics(t, s)
		if err != nil {
			return err
		}
		if m["kplane-planes"] != "alone=1" {
			return fmt.Errorf("leader metrics %v", m)
		}
		return nil
	}
	framework.Eventually(t, 30*time.Second, "every Lease names the sole server", check)
	// The work runs: a plane is provisioned and its namespace gets its
	// default ServiceAccount from the generic controllers.
	createPlane(t, s, "sole-a", "")
	framework.Eventually(t, framework.DefaultTimeout, "the controllers' default ServiceAccount in a new namespace", func(ctx context.Context) error {
		c := s.Client(t, "sole-a")
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		_, err := c.CoreV1().ServiceAccounts("team").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	if err := check(ctx); err != nil {
		t.Fatalf("after provisioning a plane: %v", err)
	}
	// No other Lease is kept: an idle sole server renews nothing (no
	// presence Lease, no apiserver identity Lease written every 10 s).
	all, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all.Items {
		if !slices.Contains(controllerLeases, l.Name) {
			t.Errorf("the sole server keeps Lease %s (held by %v)", l.Name, l.Spec.HolderIdentity)
		}
	}
	s.Kill()
	s.Restart(t)
	framework.Eventually(t, 30*time.Second, "the restarted server names itself again", check)
	createPlane(t, s, "sole-b", "")
}
