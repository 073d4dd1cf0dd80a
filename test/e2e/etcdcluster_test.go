package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestEmbeddedEtcdCluster: three servers on --datastore-endpoint etcd form
// one embedded etcd cluster (README, "Several servers"): the first, a
// single embedded etcd until then, restarted with --cluster-init, the others with --server and the join token, the third
// through the second. A write through any server is read on the others;
// the first server, killed -9 while all three take writes, loses no
// acknowledged write, the two others stay writable, and it comes back on
// its data dir serving what was written while it was down. A joined
// server restarted on its data dir is the same member. What must be
// refused is, with one line and the cluster unchanged: a wrong join token,
// an unreachable --server, a record of another kplane version, a second
// server taking a member's peer URL, a joiner whose member cannot start.
func TestEmbeddedEtcdCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	phase := func(what string) { t.Logf("%5.1fs %s", time.Since(start).Seconds(), what) }
	token := framework.NewJoinToken(t)
	one := singleEtcdBecomesCluster(t, token)
	two := startMember(t, token, "--server", one.URL)
	three := startMember(t, token, "--server", two.URL)
	phase("three servers ready")
	servers := []*framework.Server{one, two, three}
	for i, s := range servers[1:] {
		if !bytes.Equal(one.CAPEM(), s.CAPEM()) || one.AdminToken() != s.AdminToken() {
			t.Fatalf("server %d did not join the first: another CA or admin token", i+2)
		}
	}
	assertVotingMembers(t, one, 3)

	const plane = "replicated"
	createPlane(t, one, plane, "")
	clients := make([]*kubernetes.Clientset, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t, plane)
	}
	assertReplicated(t, clients)
	assertAllPresent(t, "on the joined servers", []*kubernetes.Clientset{two.Client(t, "root"), three.Client(t, "root")}, []string{"before-the-cluster"})
	phase("plane created, writes replicated")

	acked := killDuringWrites(t, servers, clients)
	assertAllPresent(t, "on the survivors", clients[1:], acked)
	phase("first server killed during writes")
	one.Restart(t)
	assertAllPresent(t, "on the restarted first server", clients[:1], acked)
	assertVotingMembers(t, two, 3)
	phase("first server restarted")

	t.Run("refusals", func(t *testing.T) { embeddedClusterRefusals(t, token, one, two, three) })

	// A joined server killed and restarted on its data dir is the member
	// it was: it is not added again, and serves what was written meanwhile.
	phase("refusals")
	three.Kill()
	// The killed member may have been the leader: until the two others
	// elect one, etcd answers writes "request timed out", as it does to
	// any client. The write is acknowledged once they have; an attempt
	// that timed out may have been committed all the same.
	framework.Eventually(t, framework.DefaultTimeout, "a write while the third server is down", func(ctx context.Context) error {
		_, err := clients[0].CoreV1().ConfigMaps("default").Create(ctx,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "while-three-stopped"}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	three.Restart(t)
	if n := strings.Count(three.Log(), "added to the embedded etcd cluster as a learner"); n != 1 {
		t.Errorf("the third server was added to the cluster %d times, want once", n)
	}
	assertAllPresent(t, "on the restarted third server", clients[2:], []string{"while-three-stopped"})
	assertVotingMembers(t, one, 3)
	phase("third server restarted")

	// A member removed from the cluster (etcdctl member remove) is refused
	// on its next start, its data dir naming a membership that is gone.
	three.Kill()
	removeMember(t, one, "https://127.0.0.1:"+argValue(t, three.Args, "--etcd-peer-port"))
	refusedStart(t, three.DataDir, "removed from its cluster", three.Args...)
	assertVotingMembers(t, one, 2)
	phase("removed member refused")
	// The last member, its cluster without quorum, still stops gracefully
	// within the framework's bound (SIGKILL after 30 s).
	two.Kill()
	one.Stop()
	if code := one.ExitCode(); code != 0 {
		t.Errorf("the last member's graceful stop exited with %d", code)
	}
	phase("first server stopped, its cluster without quorum")
}

// removeMember removes the member with peerURL through s's member.
func removeMember(t *testing.T, s *framework.Server, peerURL string) {
	t.Helper()
	client := s.EmbeddedEtcdClient(t)
	ctx := context.Background()
	resp, err := client.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.Members {
		if slices.Contains(m.PeerURLs, peerURL) {
			if _, err := client.MemberRemove(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no member at %s", peerURL)
}

// singleEtcdBecomesCluster starts a server on a single embedded etcd,
// writes through it, and restarts it (after kill -9) with --cluster-init:
// its member now advertises a peer URL the others can join, and keeps
// its data.
func singleEtcdBecomesCluster(t *testing.T, token string) *framework.Server {
	t.Helper()
	one := framework.StartServer(t, framework.Options{Args: []string{"--datastore-endpoint", "etcd", "--simulation=false"}})
	removeWhenPassed(t, one)
	ctx := context.Background()
	if _, err := one.Client(t, "root").CoreV1().ConfigMaps("default").Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-the-cluster"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one.Kill()
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	one.Args = append(one.Args, "--join-token", token, "--etcd-peer-port", strconv.Itoa(port), "--cluster-init")
	one.Restart(t)
	if !strings.Contains(one.Log(), "the embedded etcd member's peer URL changed") {
		t.Fatal("the single member did not advertise its new peer URL")
	}
	if _, err := one.Client(t, "root").CoreV1().ConfigMaps("default").Get(ctx, "before-the-cluster", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	return one
}

// startMember starts a server of an embedded etcd cluster with its own
// peer port on loopback.
func startMember(t *testing.T, token string, args ...string) *framework.Server {
	t.Helper()
	s := framework.StartServer(t, framework.Options{Args: append([]string{"--datastore-endpoint", "etcd",
		"--join-token", token, "--simulation=false"}, args...), PortFlags: []string{"--etcd-peer-port"}})
	removeWhenPassed(t, s)
	return s
}

// removeWhenPassed removes s's data dir (an etcd member preallocates 64
// MiB of log) once the test has passed; a failed test's stays, with its
// server log.
func removeWhenPassed(t *testing.T, s *framework.Server) {
	t.Cleanup(func() {
		if !t.Failed() {
			s.Cleanup()
		}
	})
}

// assertVotingMembers: the cluster, as s's member sees it, has n members,
// all voting and started.
func assertVotingMembers(t *testing.T, s *framework.Server, n int) {
	t.Helper()
	client := s.EmbeddedEtcdClient(t)
	framework.Eventually(t, framework.DefaultTimeout, fmt.Sprintf("%d voting members", n), func(ctx context.Context) error {
		resp, err := client.MemberList(ctx)
		if err != nil {
			return err
		}
		var names []string
		for _, m := range resp.Members {
			if m.IsLearner || m.Name == "" {
				return fmt.Errorf("member %x (%q) is a learner or not started", m.ID, m.Name)
			}
			names = append(names, m.Name)
		}
		if len(names) != n {
			return framework.Stop(fmt.Errorf("members %v, want %d", names, n))
		}
		return nil
	})
}

// assertReplicated: a ConfigMap written through each server is read
// (consistently: resourceVersion "") through every other.
func assertReplicated(t *testing.T, clients []*kubernetes.Clientset) {
	t.Helper()
	ctx := context.Background()
	for i, c := range clients {
		name := fmt.Sprintf("through-%d", i+1)
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"server": strconv.Itoa(i + 1)}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("writing through server %d: %v", i+1, err)
		}
		for j, other := range clients {
			got, err := other.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || got.Data["server"] != strconv.Itoa(i+1) {
				t.Fatalf("%s written through server %d, read through server %d: %v %v", name, i+1, j+1, got, err)
			}
		}
	}
}

// killDuringWrites writes ConfigMaps through all three servers at once,
// kills the first with SIGKILL once 30 writes are acknowledged, and goes
// on until the two others have acknowledged 30 more. It returns the names
// of the acknowledged writes.
func killDuringWrites(t *testing.T, servers []*framework.Server, clients []*kubernetes.Clientset) []string {
	t.Helper()
	var mu sync.Mutex
	var acked []string
	afterKill := -1
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				name := fmt.Sprintf("w-%d-%d", i+1, n)
				wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.CoreV1().ConfigMaps("default").Create(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
				wcancel()
				if err == nil {
					mu.Lock()
					acked = append(acked, name)
					if afterKill >= 0 && i > 0 {
						afterKill++
					}
					mu.Unlock()
				}
			}
		}()
	}
	count := func() (int, int) { mu.Lock(); defer mu.Unlock(); return len(acked), afterKill }
	framework.Eventually(t, framework.DefaultTimeout, "30 writes before the kill", func(context.Context) error {
		if n, _ := count(); n < 30 {
			return fmt.Errorf("%d writes acknowledged", n)
		}
		return nil
	})
	servers[0].Kill()
	mu.Lock()
	afterKill = 0
	mu.Unlock()
	framework.Eventually(t, framework.DefaultTimeout, "30 writes through the survivors after the kill", func(context.Context) error {
		if _, n := count(); n < 30 {
			return fmt.Errorf("%d writes acknowledged after the kill", n)
		}
		return nil
	})
	cancel()
	wg.Wait()
	n, after := count()
	t.Logf("%d writes acknowledged, %d of them through the survivors after the kill", n, after)
	return acked
}

// assertAllPresent: every name is a ConfigMap read through each client,
// with a consistent list (resourceVersion "").
func assertAllPresent(t *testing.T, where string, clients []*kubernetes.Clientset, names []string) {
	t.Helper()
	for i, c := range clients {
		framework.Eventually(t, framework.DefaultTimeout, "every acknowledged write "+where, func(ctx context.Context) error {
			list, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			have := map[string]bool{}
			for _, cm := range list.Items {
				have[cm.Name] = true
			}
			for _, name := range names {
				if !have[name] {
					return framework.Stop(fmt.Errorf("acknowledged write %s missing %s (client %d)", name, where, i+1))
				}
			}
			return nil
		})
	}
}

// embeddedClusterRefusals: each bad join is one line and exit 1, leaving
// the cluster's members as they were and its servers serving.
func embeddedClusterRefusals(t *testing.T, token string, one, two, three *framework.Server) {
	members := func() []string {
		resp, err := one.EmbeddedEtcdClient(t).MemberList(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range resp.Members {
			out = append(out, fmt.Sprintf("%x", m.ID))
		}
		slices.Sort(out)
		return out
	}
	before := members()
	peerPort := func() string {
		port, err := framework.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(port)
	}
	joinArgs := func(server, token string) []string {
		return []string{"--datastore-endpoint", "etcd", "--server", server, "--join-token", token, "--etcd-peer-port", peerPort()}
	}
	t.Run("wrong token", func(t *testing.T) {
		refusedStart(t, t.TempDir(), "did not sign its CA with this join token", joinArgs(one.URL, framework.NewJoinToken(t))...)
	})
	t.Run("unreachable server", func(t *testing.T) {
		refusedStart(t, t.TempDir(), "is unreachable", joinArgs("https://127.0.0.1:"+peerPort(), token)...)
	})
	t.Run("another kplane version", func(t *testing.T) {
		version := storeRecordOfAnotherVersion(t, one.EmbeddedEtcdClient(t), token)
		refusedStart(t, t.TempDir(), "stored by kplane v999.1.0, this server is kplane "+version, joinArgs(two.URL, token)...)
	})
	t.Run("a member's peer URL taken", func(t *testing.T) {
		args := joinArgs(one.URL, token)
		args[len(args)-1] = argValue(t, three.Args, "--etcd-peer-port")
		refusedStart(t, t.TempDir(), "already belongs to the cluster", args...)
	})
	// Added as a learner, its member cannot listen (the peer port is
	// taken): the join takes its learner away again.
	t.Run("a member that cannot start", func(t *testing.T) {
		args := joinArgs(one.URL, token)
		args[len(args)-1] = strconv.Itoa(one.Port)
		refusedStart(t, t.TempDir(), "was removed from the cluster", args...)
	})
	if after := members(); !slices.Equal(before, after) {
		t.Errorf("the refused joins changed the members: %v, then %v", before, after)
	}
	assertServing(t, one, two, three)
}

// argValue is the value of flag in args.
func argValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	t.Fatalf("no %s in %v", flag, args)
	return ""
}
