package auth

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	rbacinternal "k8s.io/kubernetes/pkg/apis/rbac"
	rbacauthorizer "k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"

	planestorage "kplane.dev/kplane/planes/storage"
)

// StoreGetter returns the storage of an RBAC resource, or nil.
type StoreGetter func(resource string) *planestorage.Store

// NewRBAC returns the upstream RBAC authorizer (and rule resolver), reading
// roles and bindings of the request's plane from the shared caches.
func NewRBAC(stores StoreGetter) *rbacauthorizer.RBACAuthorizer {
	r := &rbacReader{stores: stores}
	return rbacauthorizer.New(r, r, r, r)
}

var _ authorizer.Authorizer = &rbacauthorizer.RBACAuthorizer{}

type rbacReader struct {
	stores StoreGetter
}

func (r *rbacReader) get(ctx context.Context, resource, key string, into runtime.Object) error {
	s := r.stores(resource)
	if s == nil {
		return storage.NewKeyNotFoundError(key, 0)
	}
	return s.Get(ctx, s.ResourcePrefix()+key, storage.GetOptions{ResourceVersion: "0"}, into)
}

func (r *rbacReader) list(ctx context.Context, resource, sub string) (runtime.Object, error) {
	s := r.stores(resource)
	if s == nil {
		return nil, nil
	}
	list := s.NewList()
	err := s.GetList(ctx, s.ResourcePrefix()+sub, storage.ListOptions{
		ResourceVersion: "0", Recursive: true, Predicate: storage.Everything,
	}, list)
	return list, err
}

func (r *rbacReader) GetRole(ctx context.Context, namespace, name string) (*rbacv1.Role, error) {
	internal := &rbacinternal.Role{}
	if err := r.get(ctx, "roles", "/"+namespace+"/"+name, internal); err != nil {
		return nil, notFound(err, "roles", name)
	}
	out := &rbacv1.Role{}
	return out, legacyscheme.Scheme.Convert(internal, out, nil)
}

func (r *rbacReader) GetClusterRole(ctx context.Context, name string) (*rbacv1.ClusterRole, error) {
	internal := &rbacinternal.ClusterRole{}
	if err := r.get(ctx, "clusterroles", "/"+name, internal); err != nil {
		return nil, notFound(err, "clusterroles", name)
	}
	out := &rbacv1.ClusterRole{}
	return out, legacyscheme.Scheme.Convert(internal, out, nil)
}

func (r *rbacReader) ListRoleBindings(ctx context.Context, namespace string) ([]*rbacv1.RoleBinding, error) {
	list, err := r.list(ctx, "rolebindings", "/"+namespace)
	if err != nil || list == nil {
		return nil, err
	}
	var out []*rbacv1.RoleBinding
	err = meta.EachListItem(list, func(obj runtime.Object) error {
		b := &rbacv1.RoleBinding{}
		if err := legacyscheme.Scheme.Convert(obj, b, nil); err != nil {
			return err
		}
		out = append(out, b)
		return nil
	})
	return out, err
}

func (r *rbacReader) ListClusterRoleBindings(ctx context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	list, err := r.list(ctx, "clusterrolebindings", "")
	if err != nil || list == nil {
		return nil, err
	}
	var out []*rbacv1.ClusterRoleBinding
	err = meta.EachListItem(list, func(obj runtime.Object) error {
		b := &rbacv1.ClusterRoleBinding{}
		if err := legacyscheme.Scheme.Convert(obj, b, nil); err != nil {
			return err
		}
		out = append(out, b)
		return nil
	})
	return out, err
}
