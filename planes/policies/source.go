package policies

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/utils/lru"

	planestorage "kplane.dev/kplane/planes/storage"
)

// KindResolver maps a kind to the resource that serves it in a plane
// (built-in or one of the plane's CRDs).
type KindResolver interface {
	ForKind(ctx context.Context, plane string, gk schema.GroupKind) (gvr schema.GroupVersionResource, namespaced, ok bool)
}

// maxPlanesHeld bounds the planes whose compiled policies are kept; a
// plane evicted compiles again on its next request.
const maxPlanesHeld = 4096

// maxContents bounds the compiled policies shared by content.
const maxContents = 4096

// hookSource builds upstream's policy hooks (policy, its bindings, its
// param informer, its compiled evaluator) of one plane from what the shared
// caches hold for it. The result is kept per plane with the
// resourceVersions it was built from, and compiled evaluators per policy
// name and resourceVersion, so CEL is compiled once per change of a policy,
// and once for all planes holding the same policy.
type hookSource[P, B runtime.Object, E any] struct {
	registry   *planestorage.Registry
	policies   schema.GroupVersionResource
	bindings   schema.GroupVersionResource
	policyName func(B) string
	paramKind  func(P) *paramKindRef
	compile    func(P) E
	resolver   func() KindResolver
	held       *lru.Cache
	// byContent shares a compiled policy between every plane holding the
	// same policy (name and spec): an evaluator holds no state of a plane.
	byContent *lru.Cache
}

type paramKindRef struct {
	apiVersion, kind string
}

// planeHooks are one plane's hooks.
type planeHooks[P, B runtime.Object, E any] struct {
	mu          sync.Mutex
	fingerprint string
	hooks       []generic.PolicyHook[P, B, E]
	compiled    map[string]compiledPolicy[E]
}

type compiledPolicy[E any] struct {
	resourceVersion string
	evaluator       E
}

func newHookSource[P, B runtime.Object, E any](registry *planestorage.Registry, policies, bindings schema.GroupVersionResource,
	policyName func(B) string, paramKind func(P) *paramKindRef, compile func(P) E, resolver func() KindResolver) *hookSource[P, B, E] {
	return &hookSource[P, B, E]{registry: registry, policies: policies, bindings: bindings, policyName: policyName,
		paramKind: paramKind, compile: compile, resolver: resolver, held: lru.New(maxPlanesHeld), byContent: lru.New(maxContents)}
}

// Hooks returns the hooks of plane: none for a plane without bindings,
// after a map lookup when it and its templates hold none at all.
func (s *hookSource[P, B, E]) Hooks(ctx context.Context, plane string) ([]generic.PolicyHook[P, B, E], error) {
	if !s.registry.MayHold(plane, s.bindings.GroupResource()) {
		return nil, nil
	}
	bindings, err := newPlaneObjects(s.registry, plane, s.bindings).cached.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	if len(bindings) == 0 {
		return nil, nil
	}
	policies, err := newPlaneObjects(s.registry, plane, s.policies).cached.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	fingerprint, err := fingerprintOf(bindings, policies)
	if err != nil {
		return nil, err
	}
	held := s.planeHooks(plane)
	held.mu.Lock()
	defer held.mu.Unlock()
	if held.fingerprint == fingerprint {
		return held.hooks, nil
	}
	hooks, complete, err := s.build(ctx, plane, held, bindings, policies)
	if err != nil {
		return nil, err
	}
	held.hooks = hooks
	// Hooks whose paramKind could not be resolved are built again on the
	// next request: the CRD may be there by then.
	held.fingerprint = ""
	if complete {
		held.fingerprint = fingerprint
	}
	return hooks, nil
}

// Forget drops what is held for plane.
func (s *hookSource[P, B, E]) Forget(plane string) { s.held.Remove(plane) }

func (s *hookSource[P, B, E]) planeHooks(plane string) *planeHooks[P, B, E] {
	if v, ok := s.held.Get(plane); ok {
		return v.(*planeHooks[P, B, E])
	}
	held := &planeHooks[P, B, E]{compiled: map[string]compiledPolicy[E]{}}
	s.held.Add(plane, held)
	return held
}

// fingerprintOf names the objects a plane's hooks are built from, at
// their resourceVersions.
func fingerprintOf(lists ...[]runtime.Object) (string, error) {
	var b strings.Builder
	for _, list := range lists {
		for _, obj := range list {
			accessor, err := meta.Accessor(obj)
			if err != nil {
				return "", err
			}
			b.WriteString(accessor.GetName())
			b.WriteByte('@')
			b.WriteString(accessor.GetResourceVersion())
			b.WriteByte(',')
		}
		b.WriteByte('|')
	}
	return b.String(), nil
}

// build groups bindings by policy, as upstream's policy source does:
// bindings of a policy that does not exist are skipped.
func (s *hookSource[P, B, E]) build(ctx context.Context, plane string, held *planeHooks[P, B, E],
	bindings, policies []runtime.Object) ([]generic.PolicyHook[P, B, E], bool, error) {
	byName := map[string]P{}
	var order []string
	for _, obj := range policies {
		policy, err := convert[P](obj, s.policies.GroupVersion())
		if err != nil {
			return nil, false, err
		}
		accessor, _ := meta.Accessor(policy)
		byName[accessor.GetName()] = policy
		order = append(order, accessor.GetName())
	}
	bound := map[string][]B{}
	for _, obj := range bindings {
		binding, err := convert[B](obj, s.bindings.GroupVersion())
		if err != nil {
			return nil, false, err
		}
		bound[s.policyName(binding)] = append(bound[s.policyName(binding)], binding)
	}
	complete := true
	var hooks []generic.PolicyHook[P, B, E]
	seen := map[string]bool{}
	for _, name := range order {
		if len(bound[name]) == 0 {
			continue
		}
		seen[name] = true
		policy := byName[name]
		hook := generic.PolicyHook[P, B, E]{Policy: policy, Bindings: bound[name], Evaluator: held.evaluator(policy, s.compileShared)}
		if ref := s.paramKind(policy); ref != nil {
			hook.ParamInformer, hook.ParamScope, hook.ConfigurationError = s.params(ctx, plane, ref)
			if hook.ConfigurationError != nil {
				complete = false
			}
		}
		hooks = append(hooks, hook)
	}
	for name := range held.compiled {
		if !seen[name] {
			delete(held.compiled, name)
		}
	}
	return hooks, complete, nil
}

// compileShared compiles policy, or returns the evaluator of an identical
// policy compiled for any plane.
func (s *hookSource[P, B, E]) compileShared(policy P) E {
	key, err := contentKey(policy)
	if err != nil {
		return s.compile(policy)
	}
	if e, ok := s.byContent.Get(key); ok {
		return e.(E)
	}
	e := s.compile(policy)
	s.byContent.Add(key, e)
	return e
}

// contentKey is a digest of what compilation reads: the policy's name
// (in its messages) and spec.
func contentKey(policy runtime.Object) (string, error) {
	accessor, err := meta.Accessor(policy)
	if err != nil {
		return "", err
	}
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(policy)
	if err != nil {
		return "", err
	}
	content, err := json.Marshal([]any{accessor.GetName(), fields["spec"]})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:]), nil
}

// evaluator returns policy compiled, again only if it changed.
func (h *planeHooks[P, B, E]) evaluator(policy P, compile func(P) E) E {
	accessor, _ := meta.Accessor(policy)
	if c, ok := h.compiled[accessor.GetName()]; ok && c.resourceVersion == accessor.GetResourceVersion() {
		return c.evaluator
	}
	c := compiledPolicy[E]{resourceVersion: accessor.GetResourceVersion(), evaluator: compile(policy)}
	h.compiled[accessor.GetName()] = c
	return c.evaluator
}

// params resolves a paramKind in plane, with upstream's error text.
func (s *hookSource[P, B, E]) params(ctx context.Context, plane string, ref *paramKindRef) (paramInformer, meta.RESTScope, error) {
	gv, err := schema.ParseGroupVersion(ref.apiVersion)
	if err != nil {
		return paramInformer{}, nil, fmt.Errorf("failed to parse paramKind APIVersion: %w", err)
	}
	gvk := gv.WithKind(ref.kind)
	resolver := s.resolver()
	if resolver == nil {
		return paramInformer{}, nil, fmt.Errorf("failed to find resource referenced by paramKind: '%v'", gvk)
	}
	gvr, namespaced, ok := resolver.ForKind(ctx, plane, gvk.GroupKind())
	if !ok {
		return paramInformer{}, nil, fmt.Errorf("failed to find resource referenced by paramKind: '%v'", gvk)
	}
	gvr.Version = gv.Version
	return paramInformer{objects: newPlaneObjects(s.registry, plane, gvr)}, scopeOf(namespaced), nil
}

// convert turns a stored (internal) object into a new T at version.
func convert[T runtime.Object](obj runtime.Object, version schema.GroupVersion) (T, error) {
	var zero T
	out, err := legacyscheme.Scheme.ConvertToVersion(obj.DeepCopyObject(), version)
	if err != nil {
		return zero, fmt.Errorf("converting %T to %s: %w", obj, version, err)
	}
	typed, ok := out.(T)
	if !ok {
		return zero, fmt.Errorf("converting %T to %s: got %T", obj, version, out)
	}
	return typed, nil
}
