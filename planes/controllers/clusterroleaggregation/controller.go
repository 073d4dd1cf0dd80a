package clusterroleaggregation

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/workers"
)

// FieldManager is the manager of the rules this controller writes, the
// upstream controller's.
const FieldManager = "clusterrole-aggregation-controller"

var clusterRoles = rbacv1.Resource("clusterroles")

// Phases says where each plane is in its life (lifecycle.Manager).
type Phases interface {
	// Phase returns the phase of plane, and false if no such plane exists.
	Phase(plane string) (lifecycle.Phase, bool)
}

// Config is what the controller works with.
type Config struct {
	// Client addresses the plane in each call's context (loopback.Controller).
	Client *rest.Config
	// Storage holds the ClusterRoles of every plane.
	Storage *planestorage.Registry
	Workers int
}

// Controller aggregates ClusterRoles in every plane.
type Controller struct {
	config Config
	client kubernetes.Interface
	queue  workqueue.TypedRateLimitingInterface[string]
	quiet  *quiet
}

// New returns a controller; Run starts it.
func New(config Config) (*Controller, error) {
	client, err := kubernetes.NewForConfig(config.Client)
	if err != nil {
		return nil, fmt.Errorf("clusterrole aggregation client: %w", err)
	}
	if config.Workers <= 0 {
		config.Workers = 2
	}
	return &Controller{config: config, client: client, quiet: newQuiet(time.Now),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kplane_clusterrole_aggregation"})}, nil
}

// Wants implements controllers.Subscriber.
func (c *Controller) Wants(r schema.GroupResource) bool { return r == clusterRoles }

// Upsert implements controllers.Subscriber.
func (c *Controller) Upsert(_ schema.GroupResource, obj runtime.Object) {
	c.changed(planes.OfObject(obj))
}

// Delete implements controllers.Subscriber.
func (c *Controller) Delete(_ schema.GroupResource, obj runtime.Object) {
	c.changed(planes.OfObject(obj))
}

func (c *Controller) changed(plane string) {
	c.quiet.changed(plane)
	c.queue.AddAfter(plane, settle)
}

// Run aggregates the roles of planes whose bootstrap is done until ctx is
// done. A plane's bootstrap writes its roles all at once, the aggregated
// ones already filled in: aggregating before it is done would apply rules
// from part of them, then apply again.
func (c *Controller) Run(ctx context.Context, phases Phases) {
	workers.Run(ctx, c.queue, c.config.Workers, "clusterrole aggregation", func(ctx context.Context, plane string) error {
		return c.syncPlane(ctx, plane, phases)
	})
}

// syncPlane aggregates plane's ClusterRoles once its phase is due.
func (c *Controller) syncPlane(ctx context.Context, plane string, phases Phases) error {
	if wait := c.due(plane, phases); wait != 0 {
		if wait > 0 {
			c.queue.AddAfter(plane, wait)
		}
		return nil
	}
	if err := c.sync(planes.WithPlane(ctx, plane)); !lifecycle.Refused(err) {
		return err
	}
	return nil
}

// due returns 0 when plane is to be synced now, how long to wait when it
// is not yet (bootstrap under way, roles still changing), or a negative
// duration when it never will be (gone or being deleted).
func (c *Controller) due(plane string, phases Phases) time.Duration {
	switch phase, ok := phases.Phase(plane); {
	case !ok || phase == lifecycle.Terminating:
		c.quiet.forget(plane)
		return -1
	case phase != lifecycle.Ready:
		return settle
	}
	return c.quiet.wait(plane)
}

// sync brings every aggregated ClusterRole of the plane of ctx up to date.
func (c *Controller) sync(ctx context.Context) error {
	roles, err := c.list(ctx)
	if err != nil {
		return err
	}
	for _, role := range roles {
		if role.AggregationRule == nil {
			continue
		}
		rules, err := aggregate(role, roles)
		if err != nil {
			return fmt.Errorf("clusterrole %s: %w", role.Name, err)
		}
		if sameRules(rules, role.Rules) {
			continue
		}
		apply := rbacv1ac.ClusterRole(role.Name).WithRules(toApply(rules)...)
		if _, err := c.client.RbacV1().ClusterRoles().Apply(ctx, apply,
			metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying clusterrole %s: %w", role.Name, err)
		}
	}
	return nil
}

// list reads the ClusterRoles of the plane of ctx from the shared cache,
// sorted by name (the order upstream aggregates in).
func (c *Controller) list(ctx context.Context) ([]*rbac.ClusterRole, error) {
	s := c.config.Storage.Storage(clusterRoles)
	if s == nil {
		return nil, fmt.Errorf("no storage for %s", clusterRoles)
	}
	list := s.NewList()
	if err := s.GetList(ctx, s.ResourcePrefix(), storage.ListOptions{
		ResourceVersion: "0", Recursive: true, Predicate: storage.Everything,
	}, list); err != nil {
		return nil, fmt.Errorf("listing clusterroles: %w", err)
	}
	var roles []*rbac.ClusterRole
	err := meta.EachListItem(list, func(obj runtime.Object) error {
		if role, ok := obj.(*rbac.ClusterRole); ok {
			roles = append(roles, role)
		}
		return nil
	})
	sort.Slice(roles, func(i, j int) bool { return roles[i].Name < roles[j].Name })
	return roles, err
}

// aggregate returns the rules of role's aggregation: for each selector in
// turn, the rules of the other roles it matches (sorted by name), each rule
// once. It is upstream's syncClusterRole over roles already sorted.
func aggregate(role *rbac.ClusterRole, sorted []*rbac.ClusterRole) ([]rbac.PolicyRule, error) {
	rules := []rbac.PolicyRule{}
	seen := map[string]bool{}
	for i := range role.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&role.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			return nil, err
		}
		for _, other := range sorted {
			if other.Name == role.Name || !selector.Matches(labels.Set(other.Labels)) {
				continue
			}
			for _, rule := range other.Rules {
				if key := ruleKey(rule); !seen[key] {
					seen[key] = true
					rules = append(rules, rule)
				}
			}
		}
	}
	return rules, nil
}

// sameRules reports whether a and b grant the same rules. Order is not
// compared (upstream compares it): a plane's bootstrap writes the aggregated
// roles already filled in, in the policy's order, and rewriting every
// plane's admin, edit and view only to reorder them would cost each plane
// three writes for nothing.
func sameRules(a, b []rbac.PolicyRule) bool {
	return maps.Equal(ruleSet(a), ruleSet(b))
}

func ruleSet(rules []rbac.PolicyRule) map[string]bool {
	set := make(map[string]bool, len(rules))
	for _, rule := range rules {
		set[ruleKey(rule)] = true
	}
	return set
}

// ruleKey identifies a rule by content: equal keys for rules upstream's
// semantic equality finds equal (a nil and an empty list alike), without
// its reflection, which dominated a sync's cost.
func ruleKey(rule rbac.PolicyRule) string {
	var b strings.Builder
	for _, list := range [][]string{rule.Verbs, rule.APIGroups, rule.Resources, rule.ResourceNames, rule.NonResourceURLs} {
		b.WriteString(strconv.Itoa(len(list)))
		for _, item := range list {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(len(item)))
			b.WriteByte(':')
			b.WriteString(item)
		}
		b.WriteByte(';')
	}
	return b.String()
}

func toApply(rules []rbac.PolicyRule) []*rbacv1ac.PolicyRuleApplyConfiguration {
	out := make([]*rbacv1ac.PolicyRuleApplyConfiguration, 0, len(rules))
	for _, rule := range rules {
		r := rbacv1ac.PolicyRule()
		r.Verbs = rule.Verbs
		r.APIGroups = rule.APIGroups
		r.Resources = rule.Resources
		r.ResourceNames = rule.ResourceNames
		r.NonResourceURLs = rule.NonResourceURLs
		out = append(out, r)
	}
	return out
}
