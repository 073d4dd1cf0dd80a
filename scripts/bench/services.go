package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

type servicesParams struct {
	Creates int    // Services of each type (and ConfigMaps) created
	Old     string // an earlier binary measured the same way, or ""
}

// servicesScenario measures what a Service create costs now that a plane's
// addresses are records in the datastore: one request at a time in one
// plane, ClusterIP Services, NodePort Services and, as the anchor of a
// create that allocates nothing, ConfigMaps. For each it reports latency
// and the datastore revisions a create adds (every write is one revision;
// read from consistent lists before and after, on a plane nothing else
// writes to). With an old binary the same runs against it, side by side.
func servicesScenario(binary string, p servicesParams) (Result, error) {
	figures := map[string]float64{}
	runs := []struct{ prefix, binary string }{{"", binary}}
	if p.Old != "" {
		runs = append(runs, struct{ prefix, binary string }{"old_", p.Old})
	}
	for _, run := range runs {
		got, err := serviceCreates(run.binary, p.Creates)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", run.binary, err)
		}
		for k, v := range got {
			figures[run.prefix+k] = v
		}
	}
	notes := []string{fmt.Sprintf("ClusterIP Service create: %.1f revisions, p50 %.2f ms; NodePort: %.1f revisions, p50 %.2f ms; ConfigMap: %.1f revisions, p50 %.2f ms",
		figures["clusterip_revisions"], figures["clusterip_p50_ms"], figures["nodeport_revisions"], figures["nodeport_p50_ms"],
		figures["configmap_revisions"], figures["configmap_p50_ms"])}
	if p.Old != "" {
		notes = append(notes, fmt.Sprintf("old binary: ClusterIP %.1f revisions, p50 %.2f ms; NodePort %.1f revisions, p50 %.2f ms",
			figures["old_clusterip_revisions"], figures["old_clusterip_p50_ms"], figures["old_nodeport_revisions"], figures["old_nodeport_p50_ms"]))
	}
	return Result{Scenario: "services", Params: map[string]any{"creates": p.Creates, "old": p.Old != ""}, Figures: figures, Notes: notes}, nil
}

func serviceCreates(binary string, n int) (map[string]float64, error) {
	s, err := startServer(binary)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	c, err := s.client("services-bench")
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	// The first request provisions the plane; the first Service makes
	// the plane's registry (and its records).
	if _, err := c.CoreV1().Services("default").Create(ctx, benchService("warm", corev1.ServiceTypeNodePort), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	figures := map[string]float64{}
	for _, kind := range []string{"configmap", "clusterip", "nodeport"} {
		before, err := datastoreRevision(ctx, c)
		if err != nil {
			return nil, err
		}
		lat := make([]time.Duration, 0, n)
		for i := range n {
			name := fmt.Sprintf("%s-%d", kind, i)
			began := time.Now()
			switch kind {
			case "configmap":
				_, err = c.CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap(name, i), metav1.CreateOptions{})
			case "clusterip":
				_, err = c.CoreV1().Services("default").Create(ctx, benchService(name, corev1.ServiceTypeClusterIP), metav1.CreateOptions{})
			default:
				_, err = c.CoreV1().Services("default").Create(ctx, benchService(name, corev1.ServiceTypeNodePort), metav1.CreateOptions{})
			}
			if err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(began))
		}
		after, err := datastoreRevision(ctx, c)
		if err != nil {
			return nil, err
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		figures[kind+"_p50_ms"] = ms(percentile(lat, 0.50))
		figures[kind+"_p99_ms"] = ms(percentile(lat, 0.99))
		figures[kind+"_revisions"] = float64(after-before) / float64(n)
	}
	return figures, nil
}

// datastoreRevision is the datastore's current revision: the resourceVersion of a
// consistent list.
func datastoreRevision(ctx context.Context, c *kubernetes.Clientset) (uint64, error) {
	list, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(list.ResourceVersion, 10, 64)
}

// benchService is a Service without a selector, so that no controller
// writes anything for it.
func benchService(name string, typ corev1.ServiceType) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Port: 80}}}}
}
