package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

type snapshotParams struct {
	Objects    int // in the measured plane, spread over 10 kinds
	BusyPlanes int // other planes written to while measuring
	BusyRate   int // writes per second to the busy planes, all together
	Calls      int // snapshots measured
}

// snapshotScenario fills one plane with Objects objects of 10 kinds, keeps
// BusyPlanes other planes writing, and measures GET /snapshot of the plane
// over HTTPS (one keep-alive connection, one call after another, as an
// agent loop would): latency percentiles and response size.
func snapshotScenario(binary string, p snapshotParams) (Result, error) {
	s, err := startServer(binary)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const plane = "snapshot-target"
	c, err := s.client(plane)
	if err != nil {
		return Result{}, err
	}
	if err := fillSnapshotPlane(ctx, c, p.Objects); err != nil {
		return Result{}, fmt.Errorf("filling %s: %w", plane, err)
	}

	busy := make([]*kubernetes.Clientset, p.BusyPlanes)
	for i := range busy {
		if busy[i], err = s.client(fmt.Sprintf("snapshot-busy-%03d", i)); err != nil {
			return Result{}, err
		}
		if _, err := busy[i].CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap("state", 0), metav1.CreateOptions{}); err != nil {
			return Result{}, fmt.Errorf("busy plane %d: %w", i, err)
		}
	}
	// The busy planes keep writing while snapshots are taken, at a steady
	// rate: their events go through the same shared caches the snapshot
	// reads.
	var writes atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(max(p.BusyRate, 1)))
	defer tick.Stop()
	work := make(chan int, 64)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				cm := benchConfigMap("state", n)
				if _, err := busy[n%len(busy)].CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err == nil {
					writes.Add(1)
				}
			}
		}()
	}
	go func() {
		defer close(work)
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				select {
				case work <- n:
				default: // the writers are behind: skip rather than queue
				}
			}
		}
	}()

	client := s.http()
	get := func() (time.Duration, int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.config(plane).Host+"/snapshot", nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		began := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(began)
		if err != nil {
			return 0, 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, 0, fmt.Errorf("snapshot: %s", resp.Status)
		}
		return took, int(n), nil
	}
	// Warm up the connection and the server.
	var size int
	for i := 0; i < 20; i++ {
		if _, size, err = get(); err != nil {
			return Result{}, err
		}
	}
	writes.Store(0)
	latencies := make([]time.Duration, p.Calls)
	began := time.Now()
	for i := range latencies {
		if latencies[i], _, err = get(); err != nil {
			return Result{}, err
		}
	}
	elapsed := time.Since(began)
	busyWrites := writes.Load()
	cancel()
	wg.Wait()

	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	return Result{
		Scenario: "snapshot",
		Params:   map[string]any{"objects": p.Objects, "kinds": 10, "busyPlanes": p.BusyPlanes, "busyWritesPerSecond": p.BusyRate, "calls": p.Calls},
		Figures: map[string]float64{
			"snapshot_p50_ms":            ms(percentile(latencies, 0.50)),
			"snapshot_p90_ms":            ms(percentile(latencies, 0.90)),
			"snapshot_p99_ms":            ms(percentile(latencies, 0.99)),
			"snapshot_bytes":             float64(size),
			"snapshots_per_second":       float64(p.Calls) / elapsed.Seconds(),
			"busy_writes_per_second":     float64(busyWrites) / elapsed.Seconds(),
			"snapshot_bytes_per_object":  float64(size) / float64(p.Objects),
			"server_rss_mib_after_calls": mustRSS(s) / (1 << 20),
		},
		Notes: []string{"latency is client-side over HTTPS on loopback (keep-alive), the whole response read"},
	}, nil
}

func mustRSS(s *server) float64 {
	rss, _ := s.rssBytes()
	return rss
}

func benchConfigMap(name string, n int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
		Data: map[string]string{"step": fmt.Sprint(n), "payload": "a small value an environment keeps"}}
}

// fillSnapshotPlane creates objects/10 objects of each of 10 kinds in
// namespace "work", with 8 concurrent writers.
func fillSnapshotPlane(ctx context.Context, c *kubernetes.Clientset, objects int) error {
	ns := "work"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	labels := map[string]string{"app": "env"}
	pod := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"}}}}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod}
	job := batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: pod.Containers}}}
	create := []func(i int) error{
		func(i int) error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta("cm", i), Data: map[string]string{"step": fmt.Sprint(i)}}, metav1.CreateOptions{})
			return err
		},
		func(i int) error {
			_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta("secret", i), StringData: map[string]string{"token": fmt.Sprint(i)}}, metav1.CreateOptions{})
			return err
		},
		func(i int) error {
			_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta("sa", i)}, metav1.CreateOptions{})
			return err
		},
		func(i int) error {
			_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: meta("pod", i), Spec: pod}, metav1.CreateOptions{})
			return err
		},
		func(i int) error {
			_, err := c.CoreV1().PodTemplates(ns).Create(ctx, &corev1.PodTemplate{ObjectMeta: meta("template", i), Template: template}, metav1.CreateOptions{})
			return err
		},
		func(i int) error {
			_, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: meta("deploy", i),
				Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
			return err
		},
		func(i int) error {
			_, err := c.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta("sts", i),
				Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
			return err
		},
		func(i int) error {
			_, err := c.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: meta("job", i), Spec: job}, metav1.CreateOptions{})
			return err
		},
		func(i int) error {
			_, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: meta("role", i),
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{})
			return err
		},
		func(i int) error {
			_, err := c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta("binding", i),
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: fmt.Sprintf("role-%04d", i)},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: fmt.Sprintf("sa-%04d", i), Namespace: ns}}}, metav1.CreateOptions{})
			return err
		},
	}
	jobs := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range jobs {
				if err := create[n%len(create)](n / len(create)); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for n := 0; n < objects; n++ {
		jobs <- n
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func meta(prefix string, i int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: fmt.Sprintf("%s-%04d", prefix, i), Labels: map[string]string{"app": "env", "episode": "1"}}
}
