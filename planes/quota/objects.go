package quota

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	api "k8s.io/kubernetes/pkg/apis/core"
	corev1conversion "k8s.io/kubernetes/pkg/apis/core/v1"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

var (
	resourceQuotas = corev1.Resource("resourcequotas")
	limitRanges    = corev1.Resource("limitranges")
)

// Objects reads a plane's ResourceQuotas and LimitRanges from the shared
// watch caches, as upstream's admission reads them from its informers.
type Objects struct {
	Registry *planestorage.Registry
}

// ListQuotas returns copies of the quotas of a plane's namespace.
func (o Objects) ListQuotas(ctx context.Context, plane, namespace string) ([]corev1.ResourceQuota, error) {
	var out []corev1.ResourceQuota
	err := o.each(ctx, resourceQuotas, plane, namespace, fromCache, func(obj runtime.Object) error {
		internal, ok := obj.(*api.ResourceQuota)
		if !ok {
			return fmt.Errorf("unexpected %T in resourcequotas", obj)
		}
		var q corev1.ResourceQuota
		if err := corev1conversion.Convert_core_ResourceQuota_To_v1_ResourceQuota(internal, &q, nil); err != nil {
			return err
		}
		out = append(out, *q.DeepCopy())
		return nil
	})
	return out, err
}

// ListLimitRanges returns copies of the LimitRanges of a plane's
// namespace, from the cache or, with live, from the datastore.
func (o Objects) ListLimitRanges(ctx context.Context, plane, namespace string, live bool) ([]*corev1.LimitRange, error) {
	opts := fromCache
	if live {
		opts = storage.ListOptions{Recursive: true, Predicate: storage.Everything}
	}
	var out []*corev1.LimitRange
	err := o.each(ctx, limitRanges, plane, namespace, opts, func(obj runtime.Object) error {
		internal, ok := obj.(*api.LimitRange)
		if !ok {
			return fmt.Errorf("unexpected %T in limitranges", obj)
		}
		lr := &corev1.LimitRange{}
		if err := corev1conversion.Convert_core_LimitRange_To_v1_LimitRange(internal, lr, nil); err != nil {
			return err
		}
		out = append(out, lr)
		return nil
	})
	return out, err
}

// each calls f with each object of resource in a plane's namespace. A
// read of the cache is no older than the resource's newest write this
// server acknowledged: a client that read a quota's calculation back must
// have its next create charged to that quota.
func (o Objects) each(ctx context.Context, resource schema.GroupResource, plane, namespace string, opts storage.ListOptions, f func(runtime.Object) error) error {
	cached := opts.ResourceVersion == fromCache.ResourceVersion
	if cached && !o.Registry.MayHold(plane, resource) {
		// Nothing of the plane's in the cache; a live lookup still reads.
		return nil
	}
	s := o.Registry.Storage(resource)
	if s == nil {
		return fmt.Errorf("%s are not served yet", resource)
	}
	read := s.GetList
	if cached {
		read = s.GetListAfterWrites
	}
	list := s.NewList()
	if err := read(planes.WithPlane(ctx, plane), s.ResourcePrefix()+"/"+namespace, opts, list); err != nil {
		return fmt.Errorf("listing %s of plane %s: %w", resource, plane, err)
	}
	return meta.EachListItem(list, f)
}
