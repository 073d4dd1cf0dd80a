package apiserver

import (
	"fmt"
	"net/url"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresourcedefinition"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	rbacinternal "k8s.io/kubernetes/pkg/apis/rbac"

	"kplane.dev/kplane/manifests"
	"kplane.dev/kplane/planes/crds"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/webhooks"
)

// crdGetters are the upstream storage getters of apiextensions: one for
// CRDs, one for custom resources (per-CRD storage versions).
type crdGetters struct {
	crds            generic.RESTOptionsGetter
	customResources generic.RESTOptionsGetter
}

// installCRDs serves apiextensions.k8s.io in every plane and returns the
// plane-aware custom-resource server.
func (c CompletedConfig) installCRDs(server *genericapiserver.GenericAPIServer) (*crds.Server, error) {
	crdREST, err := customresourcedefinition.NewREST(apiextensionsapiserver.Scheme, c.storage.Wrap(c.crdGetters.crds))
	if err != nil {
		return nil, fmt.Errorf("customresourcedefinitions: %w", err)
	}
	crdStatus := customresourcedefinition.NewStatusREST(apiextensionsapiserver.Scheme, crdREST)
	info := genericapiserver.NewDefaultAPIGroupInfo(apiextensionsv1.GroupName, apiextensionsapiserver.Scheme, metav1.ParameterCodec, apiextensionsapiserver.Codecs)
	info.VersionedResourcesStorageMap[apiextensionsv1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"customresourcedefinitions":        crdREST,
		"customresourcedefinitions/status": crdStatus,
	}
	if err := server.InstallAPIGroup(&info); err != nil {
		return nil, fmt.Errorf("installing apiextensions.k8s.io: %w", err)
	}

	builtin := builtinGroups()
	shared := c.controlPlane.Generic
	s := crds.New(crds.Config{
		Handler: crds.HandlerConfig{
			Storage: func(content string) generic.RESTOptionsGetter {
				return c.storage.WrapCustom(c.crdGetters.customResources, content)
			},
			Admission:  shared.AdmissionControl,
			Authorizer: shared.Authorization.Authorizer,
			ServiceResolver: func(plane string) webhook.ServiceResolver {
				return webhooks.NewServiceResolver(c.storage, plane)
			},
			AuthResolverWrapper: c.webhooks.egress.ResolverWrapper(),
			RequestTimeout:      shared.RequestTimeout,
			MinRequestTimeout:   secondsToDuration(shared.MinRequestTimeout),
			StaticOpenAPISpec:   info.StaticOpenAPISpec,
			MaxRequestBodyBytes: shared.MaxRequestBodyBytes,
		},
		Storages:      c.storage,
		CRDStorage:    c.storage.Storage(apiextensionsv1.Resource("customresourcedefinitions")),
		CRDStatus:     crdStatus,
		CRDs:          crdREST,
		BuiltinGroups: builtin,
		Serializer:    shared.Serializer,
	}, server.UnprotectedHandler())
	return s, nil
}

// builtinGroups are the API groups the server serves itself in every
// plane: no CRD may define resources in them.
func builtinGroups() sets.Set[string] {
	builtin := sets.New[string]()
	for _, gv := range legacyscheme.Scheme.PrioritizedVersionsAllGroups() {
		builtin.Insert(gv.Group)
	}
	return builtin.Insert(apiextensionsv1.GroupName, apiregistration.GroupName)
}

// rootOwnGroups are the groups of kplane's own API in the root plane, with
// the CRDs the server installs in them (manifests/crds).
func rootOwnGroups() (map[string]sets.Set[string], error) {
	crds, err := manifests.CRDs()
	if err != nil {
		return nil, err
	}
	own := map[string]sets.Set[string]{}
	for _, crd := range crds {
		if own[crd.Spec.Group] == nil {
			own[crd.Spec.Group] = sets.New[string]()
		}
		own[crd.Spec.Group].Insert(crd.Name)
	}
	return own, nil
}

// noServiceResolver is the resolver of the upstream apiextensions config,
// of which only the storage getters are used: CRD handlers get a resolver
// of their plane from planes/crds.
type noServiceResolver struct{}

func (noServiceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	return nil, fmt.Errorf("service %s/%s: not resolved outside a plane", namespace, name)
}

func identityAuthResolverWrapper(r webhook.AuthenticationInfoResolver) webhook.AuthenticationInfoResolver {
	return r
}

func secondsToDuration(s int) time.Duration { return time.Duration(s) * time.Second }

// internRules makes the RBAC watch caches share identical rule lists: every
// plane starts with the same roles.
func internRules(in *planestorage.Interner) planestorage.Transform {
	return func(obj runtime.Object) {
		switch r := obj.(type) {
		case *rbacinternal.ClusterRole:
			r.Rules = planestorage.Slice(in, r.Rules)
		case *rbacinternal.Role:
			r.Rules = planestorage.Slice(in, r.Rules)
		}
	}
}
