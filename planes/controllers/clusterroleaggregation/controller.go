package clusterroleaggregation

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/sirupsen/logrus"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	planestorage "kplane.dev/kplane/planes/storage"
)

// FieldManager is the manager of the rules this controller writes, the
// upstream controller's.
const FieldManager = "clusterrole-aggregation-controller"

var clusterRoles = rbacv1.Resource("clusterroles")

// settle is how long a plane's ClusterRoles may keep changing before they
// are aggregated. A plane's bootstrap writes all its roles at once (in
// parallel, the aggregated ones already filled in); aggregating while it
// is under way would apply rules from half the roles, then apply again.
// Later events of the plane during the wait add no delay.
const settle = time.Second

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
	return &Controller{config: config, client: client,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kplane_clusterrole_aggregation"})}, nil
}

// Wants implements controllers.Subscriber.
func (c *Controller) Wants(r schema.GroupResource) bool { return r == clusterRoles }

// Upsert implements controllers.Subscriber.
func (c *Controller) Upsert(_ schema.GroupResource, obj runtime.Object) {
	c.queue.AddAfter(planes.OfObject(obj), settle)
}

// Delete implements controllers.Subscriber.
func (c *Controller) Delete(_ schema.GroupResource, obj runtime.Object) {
	c.queue.AddAfter(planes.OfObject(obj), settle)
}

// Run aggregates until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	for i := 0; i < c.config.Workers; i++ {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) worker(ctx context.Context) {
	for {
		plane, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.sync(planes.WithPlane(ctx, plane))
		c.queue.Done(plane)
		if err == nil || lifecycle.Refused(err) {
			c.queue.Forget(plane)
			continue
		}
		logrus.WithError(err).WithField("plane", plane).Debug("clusterrole aggregation retries")
		c.queue.AddRateLimited(plane)
	}
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
				if !containsRule(rules, rule) {
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
	for _, rule := range a {
		if !containsRule(b, rule) {
			return false
		}
	}
	for _, rule := range b {
		if !containsRule(a, rule) {
			return false
		}
	}
	return true
}

func containsRule(haystack []rbac.PolicyRule, needle rbac.PolicyRule) bool {
	for _, rule := range haystack {
		if equality.Semantic.DeepEqual(rule, needle) {
			return true
		}
	}
	return false
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
