package apiserver

import (
	"context"
	"sync"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	policyclient "k8s.io/client-go/kubernetes/typed/policy/v1"
	podstore "k8s.io/kubernetes/pkg/registry/core/pod/storage"

	"kplane.dev/kplane/planes"
)

// planeBudgets is the PodDisruptionBudget client of upstream's eviction.
// Upstream calls it with context.TODO(), so it cannot learn the request's
// plane from the context as every other loopback call does: the eviction
// hands the plane over (planeEviction), one eviction at a time.
type planeBudgets struct {
	mu     sync.Mutex
	plane  string
	client policyclient.PodDisruptionBudgetsGetter
}

var _ policyclient.PodDisruptionBudgetsGetter = &planeBudgets{}

// PodDisruptionBudgets is called by the eviction holding b.mu.
func (b *planeBudgets) PodDisruptionBudgets(namespace string) policyclient.PodDisruptionBudgetInterface {
	return budgetsOfPlane{PodDisruptionBudgetInterface: b.client.PodDisruptionBudgets(namespace), plane: b.plane}
}

// budgetsOfPlane addresses the calls the eviction makes to one plane; any
// other call has no plane and is refused by the loopback.
type budgetsOfPlane struct {
	policyclient.PodDisruptionBudgetInterface
	plane string
}

func (b budgetsOfPlane) Get(ctx context.Context, name string, opts metav1.GetOptions) (*policyv1.PodDisruptionBudget, error) {
	return b.PodDisruptionBudgetInterface.Get(planes.WithPlane(ctx, b.plane), name, opts)
}

func (b budgetsOfPlane) List(ctx context.Context, opts metav1.ListOptions) (*policyv1.PodDisruptionBudgetList, error) {
	return b.PodDisruptionBudgetInterface.List(planes.WithPlane(ctx, b.plane), opts)
}

func (b budgetsOfPlane) UpdateStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget, opts metav1.UpdateOptions) (*policyv1.PodDisruptionBudget, error) {
	return b.PodDisruptionBudgetInterface.UpdateStatus(planes.WithPlane(ctx, b.plane), pdb, opts)
}

// planeEviction is pods/eviction: upstream's, with the plane handed to its
// budget client. Evictions are serialized server-wide: each takes a few
// milliseconds, and drains are rare next to other writes.
type planeEviction struct {
	*podstore.EvictionREST
	budgets *planeBudgets
}

var _ rest.NamedCreater = planeEviction{}

func (e planeEviction) Create(ctx context.Context, name string, obj runtime.Object, validate rest.ValidateObjectFunc,
	opts *metav1.CreateOptions,
) (runtime.Object, error) {
	plane, _ := planes.FromContext(ctx)
	e.budgets.mu.Lock()
	defer e.budgets.mu.Unlock()
	e.budgets.plane = plane
	return e.EvictionREST.Create(ctx, name, obj, validate, opts)
}
