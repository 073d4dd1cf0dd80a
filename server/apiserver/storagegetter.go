package apiserver

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"

	planestorage "kplane.dev/kplane/planes/storage"
)

// storageGetter reads a built-in resource from the plane storage registry
// exactly as the resource's registry reads it (same key, same errors).
// Admission and authentication are configured before the APIs are
// installed, so they read through the storage registry, which exists
// first, rather than through registries that do not exist yet.
type storageGetter struct {
	stores     *planestorage.Registry
	resource   schema.GroupResource
	namespaced bool
}

var _ rest.Getter = storageGetter{}

func (g storageGetter) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	s := g.stores.Storage(g.resource)
	if s == nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("%s are not served yet", g.resource))
	}
	keyFunc := genericregistry.NoNamespaceKeyFunc
	if g.namespaced {
		keyFunc = genericregistry.NamespaceKeyFunc
	}
	key, err := keyFunc(ctx, s.ResourcePrefix(), name)
	if err != nil {
		return nil, err
	}
	obj := s.New()
	if err := s.Get(ctx, key, storage.GetOptions{ResourceVersion: options.ResourceVersion}, obj); err != nil {
		return nil, storeerr.InterpretGetError(err, g.resource, name)
	}
	return obj, nil
}
