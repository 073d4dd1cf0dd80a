package bootstrap

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// SystemNamespaces exist in every plane.
var SystemNamespaces = []string{
	metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease,
}

// RootCAConfigMap is the ConfigMap every namespace gets with the CA that
// signs the server's certificate.
const RootCAConfigMap = "kube-root-ca.crt"

// NamespaceStore is the part of the namespace registry bootstrap writes
// through.
type NamespaceStore interface {
	rest.Getter
	rest.Creater
}

// Config says what a plane starts with and where to write it.
type Config struct {
	Namespaces NamespaceStore
	// Stores returns the plane-scoped storage of a core, RBAC or flowcontrol
	// resource; objects without allocation are written straight to it.
	Stores func(resource string) *planestorage.Store
	// CACert goes into every kube-root-ca.crt ConfigMap.
	CACert []byte
	// ServiceIP is the ClusterIP of default/kubernetes.
	ServiceIP net.IP
	// ServicePort is the port the kubernetes Service forwards to.
	ServicePort int32
	// NoService leaves out default/kubernetes: the server serves no
	// Services (the generic profile).
	NoService bool
	// Policy is the RBAC every plane starts with.
	Policy Policy
}

// Bootstrapper ensures planes are bootstrapped.
type Bootstrapper struct {
	config Config
	policy policyObjectList
	base   string

	known sync.Map // plane id -> struct{}
	group singleflight.Group
}

// New returns a Bootstrapper.
func New(config Config) *Bootstrapper {
	b := &Bootstrapper{config: config, policy: policyObjects(config.Policy)}
	b.base = b.baseID()
	return b
}

// Known reports whether plane was bootstrapped by this process.
func (b *Bootstrapper) Known(plane string) bool {
	_, ok := b.known.Load(plane)
	return ok
}

// Forget makes the next Ensure of plane bootstrap it again (after the plane
// was deleted).
func (b *Bootstrapper) Forget(plane string) { b.known.Delete(plane) }

// Ensure bootstraps plane unless this process already did. It returns once
// every bootstrap object exists. It is idempotent: after a restart it only
// writes what is missing.
func (b *Bootstrapper) Ensure(ctx context.Context, plane string) error {
	if b.Known(plane) {
		return nil
	}
	// The bootstrap is shared by every request waiting on it: a client that
	// gives up must not cancel it for the others.
	ch := b.group.DoChan(plane, func() (any, error) {
		// A fresh context: it carries the plane and nothing of the request
		// (no user, no namespace) that happened to trigger the bootstrap.
		bctx, cancel := context.WithTimeout(planes.WithPlane(genericapirequest.NewContext(), plane), 30*time.Second)
		defer cancel()
		w := &writes{}
		if err := b.bootstrap(bctx, w); err != nil {
			return nil, fmt.Errorf("bootstrapping plane %q: %w", plane, err)
		}
		if planes.IsBase(plane) {
			// Planes on the base read it from the watch caches: they must
			// hold what was just written before any plane is served.
			if err := w.awaitCaches(bctx, b.config.Stores); err != nil {
				return nil, fmt.Errorf("waiting for the caches of plane %q: %w", plane, err)
			}
		}
		b.known.Store(plane, struct{}{})
		return nil, nil
	})
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Bootstrapper) bootstrap(ctx context.Context, w *writes) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range SystemNamespaces {
		g.Go(func() error { return b.ensureNamespace(gctx, w, name) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	if !b.config.NoService {
		g.Go(func() error { return b.write(gctx, w, "services", b.kubernetesService()) })
	}
	for _, ns := range SystemNamespaces {
		g.Go(func() error { return b.write(gctx, w, "configmaps", b.rootCA(ns)) })
		// The service-account controller would create it moments later;
		// written here, a ready plane accepts Pods at once.
		g.Go(func() error { return b.write(gctx, w, "serviceaccounts", defaultServiceAccount(ns)) })
	}
	for _, obj := range b.policy.all() {
		g.Go(func() error { return b.write(gctx, w, obj.resource, obj.object) })
	}
	return g.Wait()
}

func (b *Bootstrapper) ensureNamespace(ctx context.Context, w *writes, name string) error {
	if _, err := b.config.Namespaces.Get(ctx, name, &metav1.GetOptions{ResourceVersion: "0"}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	ns := &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	created, err := b.config.Namespaces.Create(createContext(ctx, "", "namespaces", name), ns, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err == nil {
		w.add("namespaces", created)
	}
	return err
}

// kubernetesService is default/kubernetes. Its address is the first of the
// range, which no allocator hands out; it is written like the other
// bootstrap objects, so that a plane that never writes a Service costs no
// Service registry of its own.
func (b *Bootstrapper) kubernetesService() runtime.Object {
	// The families are written out, as the Service registry would on
	// create: readers of storage (snapshots) see what the API shows.
	family := corev1.IPv4Protocol
	if b.config.ServiceIP.To4() == nil {
		family = corev1.IPv6Protocol
	}
	single := corev1.IPFamilyPolicySingleStack
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			ClusterIP:       b.config.ServiceIP.String(),
			ClusterIPs:      []string{b.config.ServiceIP.String()},
			IPFamilies:      []corev1.IPFamily{family},
			IPFamilyPolicy:  &single,
			SessionAffinity: corev1.ServiceAffinityNone,
			Ports: []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443,
				TargetPort: intstr.FromInt32(b.config.ServicePort)}},
		},
	}
}

func defaultServiceAccount(namespace string) runtime.Object {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: namespace}}
}

func (b *Bootstrapper) rootCA(namespace string) runtime.Object {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RootCAConfigMap, Namespace: namespace},
		Data:       map[string]string{"ca.crt": string(b.config.CACert)},
	}
}

// write stores a versioned object straight into the plane's storage unless
// it is there: bootstrap objects are the server's own and need no
// admission; going around the registries keeps a plane's birth cheap.
func (b *Bootstrapper) write(ctx context.Context, w *writes, resource string, versioned runtime.Object) error {
	s := b.config.Stores(resource)
	if s == nil {
		return fmt.Errorf("no storage for %s", resource)
	}
	internal := s.New()
	legacyscheme.Scheme.Default(versioned)
	if err := legacyscheme.Scheme.Convert(versioned, internal, nil); err != nil {
		return err
	}
	accessor, err := meta.Accessor(internal)
	if err != nil {
		return err
	}
	key := s.ResourcePrefix() + "/" + accessor.GetName()
	if ns := accessor.GetNamespace(); ns != "" {
		key = s.ResourcePrefix() + "/" + ns + "/" + accessor.GetName()
	}
	if exists(ctx, s, key) {
		return nil
	}
	rest.FillObjectMetaSystemFields(accessor)
	out := s.New()
	err = s.Create(ctx, key, internal, out, 0)
	if storage.IsExist(err) {
		return nil
	}
	if err == nil {
		w.add(resource, out)
	}
	return err
}

func exists(ctx context.Context, s *planestorage.Store, key string) bool {
	return s.Get(ctx, key, storage.GetOptions{ResourceVersion: "0"}, s.New()) == nil
}

// createContext is what the registry expects to find in the context of a
// create that the API handler would otherwise have set up.
func createContext(ctx context.Context, namespace, resource, name string) context.Context {
	ctx = genericapirequest.WithNamespace(ctx, namespace)
	return genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: resource, Name: name, Namespace: namespace,
	})
}

// writes are the newest resourceVersions a bootstrap wrote, per resource.
type writes struct {
	mu     sync.Mutex
	newest map[string]string
}

func (w *writes) add(resource string, obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	rv, err := strconv.ParseUint(accessor.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.newest == nil {
		w.newest = map[string]string{}
	}
	if old, _ := strconv.ParseUint(w.newest[resource], 10, 64); rv > old {
		w.newest[resource] = strconv.FormatUint(rv, 10)
	}
}

// awaitCaches returns once the watch cache of every resource written holds
// the newest write: a list not older than it waits for the cache.
func (w *writes) awaitCaches(ctx context.Context, stores func(resource string) *planestorage.Store) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for resource, rv := range w.newest {
		s := stores(resource)
		if s == nil || !s.Cached() {
			continue
		}
		err := s.GetList(ctx, s.ResourcePrefix(), storage.ListOptions{ResourceVersion: rv,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Recursive: true, Predicate: storage.Everything}, s.NewList())
		if err != nil {
			return fmt.Errorf("%s at resourceVersion %s: %w", resource, rv, err)
		}
	}
	return nil
}
