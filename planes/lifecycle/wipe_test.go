package lifecycle

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/rbac"
)

// A reset keeps the plane's admin credential as `kplane kubeconfig` made
// it, and nothing else.
func TestKeptByReset(t *testing.T) {
	handedOut := func() *rbac.ClusterRoleBinding {
		return &rbac.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kplane-admin"},
			RoleRef:  rbac.RoleRef{APIGroup: rbac.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbac.Subject{{Kind: rbac.ServiceAccountKind, Name: "kplane-admin", Namespace: "kube-system"}}}
	}
	widened := handedOut()
	widened.Subjects = append(widened.Subjects, rbac.Subject{Kind: rbac.GroupKind, APIGroup: rbac.GroupName, Name: "system:serviceaccounts"})
	other := handedOut()
	other.Name = "agent-admin"
	sa := func(ns, name string) *api.ServiceAccount {
		return &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	for _, c := range []struct {
		what     string
		resource schema.GroupResource
		obj      runtime.Object
		kept     bool
	}{
		{"the admin ServiceAccount", serviceAccountsResource, sa("kube-system", "kplane-admin"), true},
		{"a namesake in another namespace", serviceAccountsResource, sa("default", "kplane-admin"), false},
		{"another ServiceAccount", serviceAccountsResource, sa("kube-system", "robot"), false},
		{"the binding as handed out", clusterRoleBindingsResource, handedOut(), true},
		{"the binding widened by an episode", clusterRoleBindingsResource, widened, false},
		{"another binding", clusterRoleBindingsResource, other, false},
		{"a ConfigMap of the name", schema.GroupResource{Resource: "configmaps"},
			&api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kplane-admin"}}, false},
	} {
		if got := keptByReset(c.resource, c.obj); got != c.kept {
			t.Errorf("%s: kept %v, want %v", c.what, got, c.kept)
		}
	}
}
