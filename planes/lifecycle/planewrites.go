package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// errPlanesNotBuilt: the Planes' storage is asked for before the
// kplane-planes post-start hook built it (a request during start-up).
var errPlanesNotBuilt = errors.New("the Planes' storage is not built yet")

// planesStore returns the storage of the root's Planes. It is built
// before the lifecycle starts (the kplane-planes post-start hook). A new
// spec of the Plane CRD (a new release's, applied by the kplane-root-crds
// hook meanwhile) moves root to the storage of the new content, which is
// built on its first use and never was: the Planes were then never listed
// and the server never became ready. It is built here when missing.
func (m *Manager) planesStore() (*planestorage.Store, error) {
	if store := m.config.Storage.StorageFor(planes.Root, planeResource); store != nil {
		return store, nil
	}
	if m.config.CustomResources != nil {
		// Builds what root's CRDs need and returns: nothing here waits.
		if err := m.config.CustomResources.EnsureStorages(context.Background(), planes.Root); err != nil {
			return nil, fmt.Errorf("building the Planes' storage: %w", err)
		}
		if store := m.config.Storage.StorageFor(planes.Root, planeResource); store != nil {
			return store, nil
		}
	}
	return nil, errPlanesNotBuilt
}

// readPlane reads plane's Plane from the datastore (a consistent read,
// straight from its storage).
func (m *Manager) readPlane(ctx context.Context, plane string) (*unstructured.Unstructured, error) {
	store, err := m.planesStore()
	if err != nil {
		return nil, fmt.Errorf("reading Plane %s: %w", plane, err)
	}
	out := &unstructured.Unstructured{}
	if err := store.Get(planes.WithPlane(ctx, planes.Root), store.ResourcePrefix()+"/"+plane, storage.GetOptions{}, out); err != nil {
		return nil, err
	}
	return out, nil
}

// updatePlane changes plane's Plane with change, straight in its storage,
// and returns the Plane's new resourceVersion. The lifecycle's own writes
// (status, reset marks) go this way: they are the server's bookkeeping,
// and the same write as a request through the API (authentication,
// admission, schema coercion, managed fields) cost 4-6 ms each, twice per
// reset and once per new plane.
func (m *Manager) updatePlane(ctx context.Context, plane string, change func(*unstructured.Unstructured)) (uint64, error) {
	store, err := m.planesStore()
	if err != nil {
		return 0, fmt.Errorf("writing Plane %s: %w", plane, err)
	}
	out := &unstructured.Unstructured{}
	update := func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
		u, ok := input.(*unstructured.Unstructured)
		if !ok {
			return nil, nil, fmt.Errorf("the Planes' storage holds a %T", input)
		}
		u = u.DeepCopy()
		change(u)
		return u, nil, nil
	}
	key := store.ResourcePrefix() + "/" + plane
	if err := store.GuaranteedUpdate(planes.WithPlane(ctx, planes.Root), key, out, false, nil, update, nil); err != nil {
		return 0, err
	}
	return resourceVersionOf(out), nil
}

// mergeStatus merges status into u's status as a JSON merge patch would:
// maps key by key, anything else replaced.
func mergeStatus(u *unstructured.Unstructured, status map[string]any) {
	current, _ := u.Object["status"].(map[string]any)
	u.Object["status"] = mergeMaps(current, status)
}

func mergeMaps(dst, src map[string]any) map[string]any {
	if dst == nil {
		dst = map[string]any{}
	}
	for k, v := range src {
		if sub, ok := v.(map[string]any); ok {
			existing, _ := dst[k].(map[string]any)
			dst[k] = mergeMaps(existing, sub)
			continue
		}
		dst[k] = v
	}
	return dst
}
