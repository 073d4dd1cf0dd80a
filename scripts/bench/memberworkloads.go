package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

type memberWorkloadsParams struct {
	Members   int
	Workers   int
	Bootstrap string
}

// memberWorkloadsScenario measures workloads in a template's members: a
// template with a 3-replica Deployment running, a Fleet of Members made
// from it (each member's Deployment is Available as inherited, with no
// write of its own), then every member's Deployment scaled to 4 at once:
// the controllers act in each member on the objects it inherited.
func memberWorkloadsScenario(binary string, p memberWorkloadsParams) (Result, error) {
	s, err := startServer(binary, "--plane-bootstrap", p.Bootstrap)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	figures := map[string]float64{}
	if _, err := deployOne(ctx, s, "tmpl", make(chan struct{}, 1)); err != nil {
		return Result{}, fmt.Errorf("template: %w", err)
	}
	before, err := measure(s)
	if err != nil {
		return Result{}, err
	}
	root, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return Result{}, err
	}
	fleets := root.Resource(fleetsGVR)
	began := time.Now()
	created, err := fleets.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kplane.dev/v1", "kind": "Fleet", "metadata": map[string]any{"name": "members"},
		"spec": map[string]any{"replicas": int64(p.Members), "template": "tmpl", "deletionPolicy": "Delete"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return Result{}, err
	}
	if _, err := awaitFleetReady(ctx, fleets, created, p.Members, began); err != nil {
		return Result{}, err
	}
	figures["fleet_ready_seconds"] = time.Since(began).Seconds()
	members := make([]string, p.Members)
	for i := range members {
		members[i] = fmt.Sprintf("members-%04d", i)
	}
	if err := eachMember(ctx, s, members, p.Workers, func(ctx context.Context, c kubernetes.Interface) error {
		return awaitDeployment(ctx, c, "web", available(3))
	}); err != nil {
		return Result{}, fmt.Errorf("inherited Deployments: %w", err)
	}
	figures["all_available_seconds"] = time.Since(began).Seconds()
	ready, err := measure(s)
	if err != nil {
		return Result{}, err
	}
	figures["marginal_live_heap_kib_per_member"] = (ready.liveHeap - before.liveHeap) / 1024 / float64(p.Members)
	figures["marginal_rss_kib_per_member"] = (ready.rss - before.rss) / 1024 / float64(p.Members)

	began = time.Now()
	scale := []byte(`{"spec":{"replicas":4}}`)
	if err := eachMember(ctx, s, members, p.Workers, func(ctx context.Context, c kubernetes.Interface) error {
		if _, err := c.AppsV1().Deployments("default").Patch(ctx, "web", types.MergePatchType, scale, metav1.PatchOptions{}); err != nil {
			return err
		}
		return awaitDeployment(ctx, c, "web", available(4))
	}); err != nil {
		return Result{}, fmt.Errorf("scaling: %w", err)
	}
	figures["scale_all_available_seconds"] = time.Since(began).Seconds()
	// A controller that acted on a member before it held what the member
	// inherits made a ReplicaSet of its own next to the inherited one.
	var extra sync.Mutex
	figures["members_with_a_second_replicaset"] = 0
	if err := eachMember(ctx, s, members, p.Workers, func(ctx context.Context, c kubernetes.Interface) error {
		list, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) > 1 {
			extra.Lock()
			figures["members_with_a_second_replicaset"]++
			extra.Unlock()
		}
		return err
	}); err != nil {
		return Result{}, err
	}
	queueFigures(s, figures)
	return Result{
		Scenario: "member-workloads",
		Params:   map[string]any{"members": p.Members, "workers": p.Workers, "bootstrap": p.Bootstrap, "replicas": 3},
		Figures:  figures,
		Notes: []string{
			fmt.Sprintf("%d members of a template running a 3-replica Deployment: Fleet ready and every member's Deployment Available in %.1f s (the goal for 1,000 planes is 30 s)",
				p.Members, figures["all_available_seconds"]),
			fmt.Sprintf("every member's Deployment scaled 3 -> 4 at once: all Available in %.1f s", figures["scale_all_available_seconds"]),
			"marginal memory per member is the Fleet's members with their inherited workloads in the controllers' informers",
		},
	}, nil
}

// eachMember runs f against every member's client, workers at a time.
func eachMember(ctx context.Context, s *server, members []string, workers int, f func(context.Context, kubernetes.Interface) error) error {
	sem := make(chan struct{}, workers)
	errs := make(chan error, len(members))
	var wg sync.WaitGroup
	for _, member := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := s.client(member)
			if err == nil {
				err = f(ctx, c)
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %w", member, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// available is a Deployment whose current spec has rolled out to replicas
// available Pods.
func available(replicas int32) func(*appsv1.Deployment) bool {
	return func(d *appsv1.Deployment) bool {
		return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == replicas &&
			d.Status.AvailableReplicas == replicas && d.Status.Replicas == replicas
	}
}

// awaitDeployment waits until Deployment name in default satisfies done.
func awaitDeployment(ctx context.Context, c kubernetes.Interface, name string, done func(*appsv1.Deployment) bool) error {
	deployments := c.AppsV1().Deployments("default")
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := deployments.List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return err
	}
	for i := range list.Items {
		if done(&list.Items[i]) {
			return nil
		}
	}
	rv := list.ResourceVersion
	for {
		w, err := deployments.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: rv})
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok {
				continue
			}
			rv = d.ResourceVersion
			if ev.Type != watch.Deleted && done(d) {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return fmt.Errorf("deployment %s: %w", name, ctx.Err())
		}
	}
}
