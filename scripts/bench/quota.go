package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

type quotaParams struct {
	Creates int // ConfigMaps created in each plane
	Deletes int // deletes whose status.used update is timed
}

// quotaScenario measures what ResourceQuota admission costs a create, side
// by side on one server: ConfigMap creates alternate between a plane
// without quotas and a plane with one ResourceQuota (count/configmaps and
// configmaps) in the namespace, one request at a time. It then times how
// long status.used takes to follow a delete (the resource-quota
// controller), polling every 10 ms.
func quotaScenario(binary string, p quotaParams) (Result, error) {
	s, err := startServer(binary)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	ctx := context.Background()
	none, err := s.client("quota-none")
	if err != nil {
		return Result{}, err
	}
	one, err := s.client("quota-one")
	if err != nil {
		return Result{}, err
	}
	limit := resource.MustParse(fmt.Sprint(10 * (p.Creates + 10)))
	if _, err := one.CoreV1().ResourceQuotas("default").Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": limit, corev1.ResourceConfigMaps: limit}}}, metav1.CreateOptions{}); err != nil {
		return Result{}, err
	}
	if err := waitQuotaUsed(ctx, one, func(int64) bool { return true }); err != nil {
		return Result{}, fmt.Errorf("first usage of the quota: %w", err)
	}
	// Both planes get a ConfigMap first: the first request of a plane
	// provisions it.
	var withoutQuota, withQuota []time.Duration
	for i := -1; i < p.Creates; i++ {
		for _, c := range []struct {
			client *kubernetes.Clientset
			into   *[]time.Duration
		}{{none, &withoutQuota}, {one, &withQuota}} {
			began := time.Now()
			if _, err := c.client.CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap(fmt.Sprintf("cm-%d", i+1), i), metav1.CreateOptions{}); err != nil {
				return Result{}, err
			}
			if i >= 0 {
				*c.into = append(*c.into, time.Since(began))
			}
		}
	}
	follows, err := usedFollowsDeletes(ctx, one, p.Deletes)
	if err != nil {
		return Result{}, err
	}
	figures := map[string]float64{}
	for name, lat := range map[string][]time.Duration{"no_quota": withoutQuota, "one_quota": withQuota, "used_follows_delete": follows} {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		figures[name+"_p50_ms"] = ms(percentile(lat, 0.50))
		figures[name+"_p99_ms"] = ms(percentile(lat, 0.99))
	}
	figures["one_quota_create_p50_ratio"] = figures["one_quota_p50_ms"] / figures["no_quota_p50_ms"]
	return Result{
		Scenario: "quota",
		Params:   map[string]any{"creates": p.Creates, "deletes": p.Deletes},
		Figures:  figures,
		Notes: []string{fmt.Sprintf("ConfigMap create p50 %.2f ms without a quota, %.2f ms with one (each create also writes the quota's usage, as upstream); status.used follows a delete in %.0f ms p50, %.0f ms p99 (the goal is 1 s)",
			figures["no_quota_p50_ms"], figures["one_quota_p50_ms"], figures["used_follows_delete_p50_ms"], figures["used_follows_delete_p99_ms"])},
	}, nil
}

// usedFollowsDeletes deletes n of the ConfigMaps one after another and
// times each until the quota's status.used shows it.
func usedFollowsDeletes(ctx context.Context, c *kubernetes.Clientset, n int) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		q, err := c.CoreV1().ResourceQuotas("default").Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		used := q.Status.Used[corev1.ResourceName("count/configmaps")]
		before := used.Value()
		began := time.Now()
		if err := c.CoreV1().ConfigMaps("default").Delete(ctx, fmt.Sprintf("cm-%d", i), metav1.DeleteOptions{}); err != nil {
			return nil, err
		}
		if err := waitQuotaUsed(ctx, c, func(v int64) bool { return v == before-1 }); err != nil {
			return nil, fmt.Errorf("delete %d: %w", i, err)
		}
		out = append(out, time.Since(began))
	}
	return out, nil
}

// waitQuotaUsed polls quota q every 10 ms until its count/configmaps usage
// satisfies ok, for at most 30 s.
func waitQuotaUsed(ctx context.Context, c *kubernetes.Clientset, ok func(int64) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		q, err := c.CoreV1().ResourceQuotas("default").Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if used, found := q.Status.Used[corev1.ResourceName("count/configmaps")]; found && ok(used.Value()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("status.used %v: %w", q.Status.Used, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
