package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// controllersScenario measures what the generic controllers cost an idle
// plane (the density scenario with and without them, each on a fresh
// server) and how fast they delete namespaces: one namespace with a few
// objects in each of the planes, all deleted at once.
func controllersScenario(binary string, p densityParams) (Result, error) {
	off := p
	off.ExtraArgs = append(append([]string{}, p.ExtraArgs...), "--disable-controllers")
	without, err := density(binary, off)
	if err != nil {
		return Result{}, fmt.Errorf("without controllers: %w", err)
	}
	on := p
	on.After = func(s *server, figures map[string]float64) error {
		return namespaceDeletions(s, p, figures)
	}
	with, err := density(binary, on)
	if err != nil {
		return Result{}, fmt.Errorf("with controllers: %w", err)
	}
	figures := map[string]float64{}
	for k, v := range without.Figures {
		figures["without_"+k] = v
	}
	for k, v := range with.Figures {
		figures["with_"+k] = v
	}
	rise := with.Figures["marginal_rss_mib_per_plane"]/without.Figures["marginal_rss_mib_per_plane"] - 1
	figures["marginal_rss_rise_ratio"] = rise
	notes := []string{fmt.Sprintf("marginal RSS per idle plane with controllers is %+.1f%% of that without (the bound is +10%%)", rise*100)}
	if s := figures["with_namespace_deletions_total_seconds"]; s > 0 {
		notes = append(notes, fmt.Sprintf("%d namespace deletions over %d planes finished in %.1f s (the goal is 30 s)", p.Planes, p.Planes, s))
	}
	return Result{
		Scenario: "controllers",
		Params:   without.Params,
		Figures:  figures,
		Notes:    notes,
	}, nil
}

// namespaceDeletions creates namespace "work" with three ConfigMaps in
// every bench plane, then deletes all of them with p.Workers clients and
// waits until each is gone.
func namespaceDeletions(s *server, p densityParams, figures map[string]float64) error {
	names := make([]string, p.Planes)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%05d", i)
	}
	_, _, err := forEach(names, p.Workers, func(ctx context.Context, plane string) error {
		c, err := s.client(plane)
		if err != nil {
			return err
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "work"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": "v"}}
			if _, err := c.CoreV1().ConfigMaps("work").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("filling namespaces: %w", err)
	}
	// Let the service-account controller finish with the new namespaces.
	time.Sleep(2 * time.Second)

	began := time.Now()
	_, _, err = forEach(names, p.Workers, func(ctx context.Context, plane string) error {
		c, err := s.client(plane)
		if err != nil {
			return err
		}
		return c.CoreV1().Namespaces().Delete(ctx, "work", metav1.DeleteOptions{})
	})
	if err != nil {
		return fmt.Errorf("deleting namespaces: %w", err)
	}
	issued := time.Since(began)
	// Polling every 50ms keeps the waiting clients from competing with the
	// deletions they wait for.
	_, _, err = forEach(names, p.Workers, func(ctx context.Context, plane string) error {
		c, err := s.client(plane)
		if err != nil {
			return err
		}
		for {
			_, err := c.CoreV1().Namespaces().Get(ctx, "work", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	if err != nil {
		return fmt.Errorf("waiting for namespaces: %w", err)
	}
	total := time.Since(began)
	figures["namespace_deletions"] = float64(p.Planes)
	figures["namespace_deletions_issued_seconds"] = issued.Seconds()
	figures["namespace_deletions_total_seconds"] = total.Seconds()
	figures["namespace_deletions_per_second"] = float64(p.Planes) / total.Seconds()
	return nil
}
