package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// scaleoutParams configure the scaleout scenario.
type scaleoutParams struct {
	// Servers are the server counts measured, one fresh etcd each.
	Servers []int
	Ops     int
	Workers int
	// Etcd and CacheDir find (or build) the etcd server binary.
	Etcd, CacheDir string
}

// sharedCredentials are what a server joining the first one's datastore
// copies (README, "Several servers").
var sharedCredentials = []string{"tls/ca.crt", "tls/ca.key", "tls/service-account.key", "tokens.csv"}

// scaleoutScenario measures several kplane servers on one etcd: GET, LIST
// and CREATE throughput and p99 with the load spread round-robin over 1,
// 2 and 3 servers (all on this machine's cores, as etcd), each server's
// memory, and how long the work of a killed (-9) controllers holder
// waits for another server: until the Leases move, and until a plane
// created after the kill is Ready.
func scaleoutScenario(binary string, p scaleoutParams) (Result, error) {
	_, etcdBin, _, err := baselineBinaries(baselineParams{KubeAPIServer: "unused", Etcd: p.Etcd, CacheDir: p.CacheDir, Build: true})
	if err != nil {
		return Result{}, err
	}
	figures := map[string]float64{}
	for _, n := range p.Servers {
		if err := scaleoutRound(binary, etcdBin, n, p, figures); err != nil {
			return Result{}, fmt.Errorf("%d servers: %w", n, err)
		}
	}
	return Result{
		Scenario: "scaleout",
		Params:   map[string]any{"servers": p.Servers, "requestsPerVerb": p.Ops, "workers": p.Workers, "datastore": "etcd (one member, same machine)"},
		Figures:  figures,
		Notes: []string{
			fmt.Sprintf("Each verb runs %d requests (after a fifth as many unmeasured) from %d clients, round-robin over the servers, all in one plane of %d ConfigMaps. "+
				"The servers, etcd and the clients share this machine's %d CPUs: more servers add no CPU, so the figures show what the servers cost each other, not what more machines would give.",
				p.Ops, p.Workers, seedObjects, runtime.NumCPU()),
			"takeover: the holder of the controllers' Leases is killed (-9); lease_takeover_seconds is until another server holds kplane-planes, " +
				"plane_ready_after_kill_seconds until a Plane created right after the kill is Ready (provisioned by the new holder).",
		},
	}, nil
}

// scaleoutRound measures n servers on a fresh etcd.
func scaleoutRound(binary, etcdBin string, n int, p scaleoutParams, figures map[string]float64) error {
	dir, err := os.MkdirTemp("", "kplane-bench-scaleout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	etcd, endpoint, err := startEtcd(etcdBin, filepath.Join(dir, "etcd"))
	if err != nil {
		return err
	}
	defer stopProcess(etcd)
	servers, err := startJoined(binary, endpoint, n)
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	if err != nil {
		return err
	}
	if _, err := createPlane(servers[0], "scaleout", seedObjects); err != nil {
		return err
	}
	clients := make([]*kubernetes.Clientset, n)
	for i, s := range servers {
		if clients[i], err = s.client("scaleout"); err != nil {
			return err
		}
	}
	prefix := fmt.Sprintf("servers_%d_", n)
	if err := scaleoutLoad(clients, p, prefix, figures); err != nil {
		return err
	}
	var total float64
	for i, s := range servers {
		_ = s.collectGarbage()
		rss, err := s.rssBytes()
		if err != nil {
			return err
		}
		figures[fmt.Sprintf("%sserver_%d_rss_mib", prefix, i+1)] = rss / (1 << 20)
		total += rss
	}
	figures[prefix+"rss_mib_per_server"] = total / float64(n) / (1 << 20)
	if n > 1 {
		return scaleoutTakeover(servers, prefix, figures)
	}
	return nil
}

// startJoined starts n servers on endpoint, the later ones with the
// first's shared credentials; the first holds the controllers' Leases.
func startJoined(binary, endpoint string, n int) ([]*server, error) {
	var servers []*server
	for i := range n {
		args := []string{"--datastore-endpoint", endpoint, "--server-name", fmt.Sprintf("s%d", i+1)}
		if i == 0 {
			s, err := startServer(binary, args...)
			if err != nil {
				return servers, err
			}
			servers = append(servers, s)
			continue
		}
		dir, err := os.MkdirTemp("", "kplane-bench-")
		if err != nil {
			return servers, err
		}
		for _, name := range sharedCredentials {
			data, err := os.ReadFile(filepath.Join(servers[0].dir, name))
			if err != nil {
				return servers, err
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700); err != nil {
				return servers, err
			}
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				return servers, err
			}
		}
		s, err := startServerOnFreePort(binary, dir, args...)
		if err != nil {
			return servers, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// scaleoutLoad runs GET, LIST and CREATE round-robin over the servers.
func scaleoutLoad(clients []*kubernetes.Clientset, p scaleoutParams, prefix string, figures map[string]float64) error {
	verbs := configMapVerbs()
	for _, v := range verbs {
		do := func(ctx context.Context, i int) error { return v.do(ctx, clients[i%len(clients)], i) }
		if _, _, err := load(max(1, p.Ops/5), p.Workers, do); err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		lat, took, err := load(p.Ops, p.Workers, do)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		figures[prefix+v.name+"_per_second"] = float64(p.Ops) / took.Seconds()
		figures[prefix+v.name+"_p99_ms"] = ms(percentile(lat, 0.99))
	}
	return nil
}

// scaleoutTakeover kills the first server (the holder) and times the
// takeover through the second.
func scaleoutTakeover(servers []*server, prefix string, figures map[string]float64) error {
	other := servers[1]
	client, err := other.client("root")
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(other.config("root"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "kplane-planes", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != "s1" {
		return fmt.Errorf("the first server does not hold kplane-planes (%v)", h)
	}
	_ = servers[0].cmd.Process.Kill()
	_, _ = servers[0].cmd.Process.Wait()
	killed := time.Now()
	plane := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplane.dev/v1", "kind": "Plane",
		"metadata": map[string]any{"name": "after-kill"}}}
	if _, err := dyn.Resource(planesGVR).Create(ctx, plane, metav1.CreateOptions{}); err != nil {
		return err
	}
	moved, ready := time.Duration(0), time.Duration(0)
	for (moved == 0 || ready == 0) && ctx.Err() == nil {
		if moved == 0 {
			if l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "kplane-planes", metav1.GetOptions{}); err == nil &&
				l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "s1" {
				moved = time.Since(killed)
			}
		}
		if ready == 0 {
			if u, err := dyn.Resource(planesGVR).Get(ctx, "after-kill", metav1.GetOptions{}); err == nil {
				if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase == "Ready" {
					ready = time.Since(killed)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("no takeover within 2 minutes")
	}
	figures[prefix+"lease_takeover_seconds"] = moved.Seconds()
	figures[prefix+"plane_ready_after_kill_seconds"] = ready.Seconds()
	return nil
}
