package storage

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"kplane.dev/kplane/planes"
)

// UndecodableAnnotation marks an object a custom-resource storage could not
// decode with its CRD content: it belongs to a plane whose CRD differs, and
// the storage keeps only its identity.
const UndecodableAnnotation = "kplane.dev/undecodable"

// objectKeyFunc keys a custom resource by what the object says, namespaced
// or not. The registry's key function depends on the CRD's scope, and one
// prefix holds the objects of every plane's CRD, whatever its scope.
func objectKeyFunc(resourcePrefix string) func(runtime.Object) (string, error) {
	return func(obj runtime.Object) (string, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return "", fmt.Errorf("custom resource of type %T", obj)
		}
		if ns := u.GetNamespace(); ns != "" {
			return resourcePrefix + "/" + ns + "/" + u.GetName(), nil
		}
		return resourcePrefix + "/" + u.GetName(), nil
	}
}

// tolerantConfig returns config with a codec that never fails to decode a
// stored custom resource, and converts only the objects of planes owns
// says are served with it.
func tolerantConfig(config *storagebackend.ConfigForResource, version schema.GroupVersion, owns func(plane string) bool) *storagebackend.ConfigForResource {
	if config == nil || config.Codec == nil {
		return config
	}
	copied := *config
	copied.Codec = tolerantCodec{Codec: config.Codec, version: version, owns: owns}
	return &copied
}

// tolerantCodec decodes what its CRD content can, and keeps only the
// identity of what it cannot (an object its CRD cannot convert, such as
// one stored in a version only another plane's CRD defines). Upstream ends
// a watch and fails a list on one undecodable object; in a storage shared
// by planes that would let one plane's CRD break another plane's cache.
type tolerantCodec struct {
	runtime.Codec
	// version is the version the codec decodes into: the storage's served
	// version.
	version schema.GroupVersion
	// owns reports whether the storage serves plane's objects (nil: every
	// plane's).
	owns func(plane string) bool
}

func (c tolerantCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := c.decode(data, defaults, into)
	if err == nil {
		return obj, gvk, nil
	}
	stub, stubErr := identityOf(data, err, into)
	if stubErr != nil {
		return obj, gvk, err
	}
	stubGVK := stub.GroupVersionKind()
	return stub, &stubGVK, nil
}

// decode reads an object stored in the version it is read in without
// converting it. Upstream's custom-resource codec converts every object it
// decodes into one of a set version, the same one included: a deep copy and
// a second schema coercion of what its decoder has just coerced, a third of
// the time a watch cache of custom resources spends filling itself. An
// object decoded into itself takes the decoder's coercion and defaulting
// and skips the conversion; one stored in another version, or that does
// not decode so, takes upstream's path.
//
// An object of a plane this storage does not serve is never converted: its
// cache holds every plane's objects of the resource (one datastore
// prefix), and converting them could call this content's conversion
// webhook, one plane's, with another plane's objects. Nothing serves such
// an object from this storage.
func (c tolerantCodec) decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if into == nil && !c.version.Empty() {
		// A watch event's object: decoded into one of the version upstream
		// would convert it to.
		fresh := &unstructured.Unstructured{}
		fresh.SetAPIVersion(c.version.String())
		into = fresh
	}
	u, ok := into.(*unstructured.Unstructured)
	if !ok || u == nil {
		return c.Codec.Decode(data, defaults, into)
	}
	// Upstream's conversion keeps the stored kind: into names the version.
	want := u.GroupVersionKind().GroupVersion()
	if want.Empty() {
		return c.Codec.Decode(data, defaults, into)
	}
	// Without a version of its own, into is decoded in place.
	u.Object = nil
	obj, gvk, err := c.Codec.Decode(data, defaults, u)
	if err == nil && obj == into && (u.GroupVersionKind().GroupVersion() == want || !c.serves(u)) {
		return obj, gvk, nil
	}
	u.Object = nil
	u.SetAPIVersion(want.String())
	return c.Codec.Decode(data, defaults, into)
}

// serves reports whether obj's plane is served with this storage's CRD.
func (c tolerantCodec) serves(obj *unstructured.Unstructured) bool {
	return c.owns == nil || c.owns(planes.OfObject(obj))
}

// identityOf builds an object holding only the identity of the stored
// object in data, marked undecodable with why.
func identityOf(data []byte, why error, into runtime.Object) (*unstructured.Unstructured, error) {
	var stored struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(data, &stored); err != nil {
		return nil, err
	}
	plane := stored.Metadata.Annotations[planes.Annotation]
	if plane == "" || stored.Metadata.Name == "" {
		return nil, fmt.Errorf("stored object without identity")
	}
	u, ok := into.(*unstructured.Unstructured)
	if !ok || u == nil {
		u = &unstructured.Unstructured{}
	}
	u.Object = map[string]interface{}{}
	u.SetAPIVersion(stored.APIVersion)
	u.SetKind(stored.Kind)
	u.SetName(stored.Metadata.Name)
	u.SetNamespace(stored.Metadata.Namespace)
	u.SetUID(stored.Metadata.UID)
	u.SetCreationTimestamp(stored.Metadata.CreationTimestamp)
	u.SetAnnotations(map[string]string{planes.Annotation: plane, UndecodableAnnotation: why.Error()})
	return u, nil
}
