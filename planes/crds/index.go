package crds

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"sync"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"kplane.dev/kplane/planes"
)

// entry is one CRD of one plane.
type entry struct {
	plane string
	crd   *apiextensionsv1.CustomResourceDefinition
	// hash identifies the serving behaviour of the CRD: identical specs in
	// different planes share one handler.
	hash string
	// hidden marks a plane's tombstone of a CRD it deleted from its
	// template: the name is not served, whatever the template holds.
	hidden bool
}

// planeCRDs are the CRDs of one plane.
type planeCRDs struct {
	byName map[string]*entry
	// version changes whenever a CRD of the plane does; documents derived
	// from the plane's CRDs are cached by it.
	version uint64
}

// Index holds every plane's CRDs, as v1 objects.
type Index struct {
	mu      sync.RWMutex
	byPlane map[string]*planeCRDs
	// users counts the entries per content hash; a handler whose hash has
	// no user left is torn down.
	users map[string]int
	// specs holds one v1 spec per content hash, shared by every plane's
	// entry with that content: a CRD's schema is the bulk of its memory.
	specs   map[string]*apiextensionsv1.CustomResourceDefinitionSpec
	version uint64

	synced   chan struct{}
	syncOnce sync.Once

	// onChange is told about every CRD that changed (old or new entry).
	onChange func(plane, name string)
	// onUnused is told about content hashes no CRD uses anymore.
	onUnused func(hash string)
	// templates returns a plane's templates, nearest first: a plane made
	// from a template serves the template's CRDs it did not change.
	templates func(plane string) []string
}

// layers is plane and its templates, nearest first.
func (x *Index) layers(plane string) []string {
	if x.templates == nil {
		return []string{plane}
	}
	return append([]string{plane}, x.templates(plane)...)
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{byPlane: map[string]*planeCRDs{}, users: map[string]int{},
		specs: map[string]*apiextensionsv1.CustomResourceDefinitionSpec{}, synced: make(chan struct{})}
}

// HasSynced is closed once the index has seen every stored CRD.
func (x *Index) HasSynced() <-chan struct{} { return x.synced }

// Get returns the CRD called name that plane serves: its own or,
// unless it deleted it, its template's.
func (x *Index) Get(plane, name string) (*entry, bool) {
	layers := x.layers(plane)
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, layer := range layers {
		if p := x.byPlane[layer]; p != nil {
			if e, ok := p.byName[name]; ok {
				return e, !e.hidden
			}
		}
	}
	return nil, false
}

// getOwn returns plane's own record of the CRD called name (nil for
// none or a tombstone): what the conditions controller keeps.
func (x *Index) getOwn(plane, name string) (*entry, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if p := x.byPlane[plane]; p != nil {
		if e, ok := p.byName[name]; ok && !e.hidden {
			return e, true
		}
	}
	return nil, false
}

// content returns the content hash of plane's CRD for resource: which
// custom-resource storage serves the plane.
func (x *Index) content(plane string, resource schema.GroupResource) (string, bool) {
	e, ok := x.Get(plane, resource.Resource+"."+resource.Group)
	if !ok {
		return "", false
	}
	return e.hash, true
}

// List returns the CRDs plane serves (its own and those it inherits),
// sorted by name, and a version that changes whenever one of them does.
func (x *Index) List(plane string) ([]*entry, uint64) {
	layers := x.layers(plane)
	x.mu.RLock()
	defer x.mu.RUnlock()
	byName := map[string]*entry{}
	var version uint64
	for i := len(layers) - 1; i >= 0; i-- {
		p := x.byPlane[layers[i]]
		if p == nil {
			continue
		}
		version += p.version
		for name, e := range p.byName {
			byName[name] = e
		}
	}
	out := make([]*entry, 0, len(byName))
	for _, e := range byName {
		if !e.hidden {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].crd.Name < out[j].crd.Name })
	return out, version
}

// ownKeys are every plane's own CRDs (not those a plane inherits).
func (x *Index) ownKeys() []crdKey {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []crdKey
	for plane, p := range x.byPlane {
		for name := range p.byName {
			out = append(out, crdKey{plane, name})
		}
	}
	return out
}

// HasAny reports whether plane serves at least one CRD. It is asked on
// every request, so it allocates nothing for a plane made from nothing.
func (x *Index) HasAny(plane string) bool {
	if x.templates == nil || len(x.templates(plane)) == 0 {
		x.mu.RLock()
		defer x.mu.RUnlock()
		p := x.byPlane[plane]
		return p != nil && len(p.byName) > 0 && !allHidden(p)
	}
	entries, _ := x.List(plane)
	return len(entries) > 0
}

func allHidden(p *planeCRDs) bool {
	for _, e := range p.byName {
		if !e.hidden {
			return false
		}
	}
	return true
}

// Hide implements planestorage.LayerHandler: plane deleted a CRD it
// inherited.
func (x *Index) Hide(tombstone runtime.Object) {
	x.Delete(tombstone)
	x.setHidden(tombstone, true)
}

// Unhide implements planestorage.LayerHandler: plane's tombstone of a CRD
// is gone (a reset); it serves its template's again.
func (x *Index) Unhide(tombstone runtime.Object) { x.setHidden(tombstone, false) }

func (x *Index) setHidden(tombstone runtime.Object, hidden bool) {
	plane := planes.OfObject(tombstone)
	accessor, err := meta.Accessor(tombstone)
	if err != nil || plane == "" {
		return
	}
	name := accessor.GetName()
	x.mu.Lock()
	p := x.byPlane[plane]
	switch {
	case hidden && p == nil:
		p = &planeCRDs{byName: map[string]*entry{}}
		x.byPlane[plane] = p
		fallthrough
	case hidden:
		p.byName[name] = &entry{plane: plane, hidden: true}
	case p != nil && p.byName[name] != nil && p.byName[name].hidden:
		delete(p.byName, name)
		if len(p.byName) == 0 {
			delete(x.byPlane, plane)
		}
	default:
		x.mu.Unlock()
		return
	}
	x.version++
	p.version = x.version
	x.mu.Unlock()
	x.notify(plane, name, "")
}

// Upsert implements storage.Handler.
func (x *Index) Upsert(obj runtime.Object) {
	plane := planes.OfObject(obj)
	internal, ok := obj.(*apiextensionsinternal.CustomResourceDefinition)
	if !ok || plane == "" {
		return
	}
	hash := internalHash(internal)
	if internalConversionByService(internal) {
		// The Service is the plane's: its handler, with a resolver bound
		// to the plane, is shared with no other plane.
		hash += "@" + plane
	}
	x.mu.Lock()
	spec, known := x.specs[hash]
	x.mu.Unlock()
	if !known {
		// First plane with this content: convert the spec once; every
		// other plane with it shares the result.
		full, err := toV1(internal)
		if err != nil {
			utilruntime.HandleError(err)
			return
		}
		spec = &full.Spec
	}
	crd, err := toV1Meta(internal)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	crd.Spec = *spec
	e := &entry{plane: plane, crd: crd, hash: hash}
	x.mu.Lock()
	if existing, ok := x.specs[hash]; ok {
		e.crd.Spec = *existing
	} else {
		x.specs[hash] = spec
	}
	p := x.byPlane[plane]
	if p == nil {
		p = &planeCRDs{byName: map[string]*entry{}}
		x.byPlane[plane] = p
	}
	// The new content is counted before the old one is released: an
	// update that keeps the spec (status, labels, finalizers) must not
	// see its own hash unused, which would tear down the handler and end
	// every watch of its custom resources.
	x.users[e.hash]++
	var unused string
	if old := p.byName[crd.Name]; old != nil && !old.hidden {
		unused = x.releaseLocked(old.hash)
		x.dropSpecLocked(old.hash)
	}
	p.byName[crd.Name] = e
	x.version++
	p.version = x.version
	x.mu.Unlock()
	x.notify(plane, crd.Name, unused)
}

// Delete implements storage.Handler.
func (x *Index) Delete(obj runtime.Object) {
	plane := planes.OfObject(obj)
	accessor, err := meta.Accessor(obj)
	if err != nil || plane == "" {
		return
	}
	name := accessor.GetName()
	x.mu.Lock()
	var unused string
	if p := x.byPlane[plane]; p != nil {
		if old := p.byName[name]; old != nil && !old.hidden {
			unused = x.releaseLocked(old.hash)
			x.dropSpecLocked(old.hash)
			delete(p.byName, name)
			x.version++
			p.version = x.version
			if len(p.byName) == 0 {
				delete(x.byPlane, plane)
			}
		}
	}
	x.mu.Unlock()
	x.notify(plane, name, unused)
}

// Synced implements storage.Handler.
func (x *Index) Synced() {
	x.syncOnce.Do(func() { close(x.synced) })
}

// dropSpecLocked forgets the shared spec of a hash nothing uses anymore.
func (x *Index) dropSpecLocked(hash string) {
	if x.users[hash] == 0 {
		delete(x.specs, hash)
	}
}

func (x *Index) releaseLocked(hash string) string {
	x.users[hash]--
	if x.users[hash] > 0 {
		return ""
	}
	delete(x.users, hash)
	return hash
}

func (x *Index) notify(plane, name, unused string) {
	if x.onChange != nil {
		x.onChange(plane, name)
	}
	if unused != "" && x.onUnused != nil {
		x.onUnused(unused)
	}
}

// ForgetPlane drops every CRD of a deleted plane from the index.
func (x *Index) ForgetPlane(plane string) {
	x.mu.Lock()
	p := x.byPlane[plane]
	delete(x.byPlane, plane)
	var unused []string
	if p != nil {
		for _, e := range p.byName {
			if e.hidden {
				continue
			}
			if h := x.releaseLocked(e.hash); h != "" {
				unused = append(unused, h)
				x.dropSpecLocked(h)
			}
		}
	}
	x.mu.Unlock()
	for _, h := range unused {
		if x.onUnused != nil {
			x.onUnused(h)
		}
	}
}

func toV1(obj runtime.Object) (*apiextensionsv1.CustomResourceDefinition, error) {
	if v1, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
		return v1, nil
	}
	internal, ok := obj.(*apiextensionsinternal.CustomResourceDefinition)
	if !ok {
		return nil, nil
	}
	out := &apiextensionsv1.CustomResourceDefinition{}
	if err := apiextensionsapiserver.Scheme.Convert(internal, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// internalHash identifies everything a CRD handler is built from: the name
// and the spec. Status and metadata differ per plane and are decided
// outside the handler.
func internalHash(crd *apiextensionsinternal.CustomResourceDefinition) string {
	data, _ := json.Marshal(crd.Spec)
	sum := sha256.Sum256(append([]byte(crd.Name+"\x00"), data...))
	return hex.EncodeToString(sum[:16])
}

// internalConversionByService tells whether crd converts through a
// webhook named by a Service reference.
func internalConversionByService(crd *apiextensionsinternal.CustomResourceDefinition) bool {
	c := crd.Spec.Conversion
	return c != nil && c.Strategy == apiextensionsinternal.WebhookConverter &&
		c.WebhookClientConfig != nil && c.WebhookClientConfig.Service != nil
}

// toV1Meta converts everything of a CRD but its spec.
func toV1Meta(internal *apiextensionsinternal.CustomResourceDefinition) (*apiextensionsv1.CustomResourceDefinition, error) {
	out := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: *internal.ObjectMeta.DeepCopy()}
	out.TypeMeta = metav1.TypeMeta{Kind: "CustomResourceDefinition", APIVersion: apiextensionsv1.SchemeGroupVersion.String()}
	if err := apiextensionsv1.Convert_apiextensions_CustomResourceDefinitionStatus_To_v1_CustomResourceDefinitionStatus(&internal.Status, &out.Status, nil); err != nil {
		return nil, err
	}
	return out, nil
}
