package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

type policiesParams struct {
	Creates int // ConfigMaps created in each plane
	Held    int // planes that each hold one ValidatingAdmissionPolicy
	Workers int
}

// policiesScenario measures what admission policies cost, side by side on
// one server: ConfigMap creates alternate between a plane without
// policies, a plane with one ValidatingAdmissionPolicy and a plane with one
// MutatingAdmissionPolicy matching them, one request at a time. It then
// gives Held planes one ValidatingAdmissionPolicy and binding each, sends
// each one create (which compiles its policy), and reports the memory
// added per plane.
func policiesScenario(binary string, p policiesParams) (Result, error) {
	s, err := startServer(binary)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	ctx := context.Background()
	clients := map[string]*kubernetes.Clientset{}
	for _, plane := range []string{"pol-none", "pol-vap", "pol-map"} {
		if clients[plane], err = s.client(plane); err != nil {
			return Result{}, err
		}
	}
	if err := addBenchVAP(ctx, clients["pol-vap"]); err != nil {
		return Result{}, err
	}
	if err := addBenchMAP(ctx, clients["pol-map"]); err != nil {
		return Result{}, err
	}
	latencies := map[string][]time.Duration{}
	for i := -1; i < p.Creates; i++ {
		for _, plane := range []string{"pol-none", "pol-vap", "pol-map"} {
			began := time.Now()
			if _, err := clients[plane].CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap(fmt.Sprintf("cm-%d", i+1), i), metav1.CreateOptions{}); err != nil {
				return Result{}, err
			}
			if i >= 0 {
				latencies[plane] = append(latencies[plane], time.Since(began))
			}
		}
	}
	figures := map[string]float64{}
	for plane, name := range map[string]string{"pol-none": "no_policy", "pol-vap": "one_vap", "pol-map": "one_map"} {
		lat := latencies[plane]
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		figures[name+"_p50_ms"] = ms(percentile(lat, 0.50))
		figures[name+"_p99_ms"] = ms(percentile(lat, 0.99))
	}
	if err := policiesHeld(ctx, s, p, figures); err != nil {
		return Result{}, err
	}
	return Result{
		Scenario: "policies",
		Params:   map[string]any{"creates": p.Creates, "held": p.Held},
		Figures:  figures,
		Notes: []string{fmt.Sprintf("ConfigMap create p50/p99 %.2f/%.2f ms without policies, %.2f/%.2f ms with one VAP, %.2f/%.2f ms with one MAP; %d planes holding one VAP each add %.1f KiB of heap and %.1f KiB of RSS per plane",
			figures["no_policy_p50_ms"], figures["no_policy_p99_ms"], figures["one_vap_p50_ms"], figures["one_vap_p99_ms"],
			figures["one_map_p50_ms"], figures["one_map_p99_ms"], p.Held, figures["held_heap_kib_per_plane"], figures["held_rss_kib_per_plane"])},
	}, nil
}

// policiesHeld provisions Held planes, measures memory, gives each a VAP
// that acts on one create, and measures again.
func policiesHeld(ctx context.Context, s *server, p policiesParams, figures map[string]float64) error {
	run := func(f func(c *kubernetes.Clientset, i int) error) error {
		var g errgroup.Group
		g.SetLimit(max(p.Workers, 1))
		for i := 0; i < p.Held; i++ {
			g.Go(func() error {
				c, err := s.client(fmt.Sprintf("pol-held-%d", i))
				if err != nil {
					return err
				}
				return f(c, i)
			})
		}
		return g.Wait()
	}
	if err := run(func(c *kubernetes.Clientset, i int) error {
		_, err := c.CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap("before", i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	rss0, heap0, err := settle(s)
	if err != nil {
		return err
	}
	if err := run(func(c *kubernetes.Clientset, i int) error {
		if err := addBenchVAP(ctx, c); err != nil {
			return err
		}
		_, err := c.CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap("after", i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	rss1, heap1, err := settle(s)
	if err != nil {
		return err
	}
	figures["held_heap_kib_per_plane"] = (heap1 - heap0) / 1024 / float64(p.Held)
	figures["held_rss_kib_per_plane"] = (rss1 - rss0) / 1024 / float64(p.Held)
	return nil
}

var benchConfigMapRule = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
	RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}}}

// addBenchVAP adds a policy that admits every ConfigMap after evaluating
// one expression on it.
func addBenchVAP(ctx context.Context, c *kubernetes.Clientset) error {
	_, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: benchConfigMapRule.DeepCopy(),
			Validations: []admissionregistrationv1.Validation{{Expression: "object.metadata.name.size() < 300"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "bench",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}, metav1.CreateOptions{})
	return err
}

// addBenchMAP adds a policy that labels every ConfigMap.
func addBenchMAP(ctx context.Context, c *kubernetes.Clientset) error {
	_, err := c.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{MatchConstraints: benchConfigMapRule.DeepCopy(),
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"bench": "yes"}}}`}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	_, err = c.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "bench"},
	}, metav1.CreateOptions{})
	return err
}
