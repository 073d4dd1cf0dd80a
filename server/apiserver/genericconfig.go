package apiserver

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/filters"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/pkg/util/openapi"
	clientgoinformers "k8s.io/client-go/informers"
	clientgoclientset "k8s.io/client-go/kubernetes"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	"k8s.io/kubernetes/pkg/controlplane/apiserver/options"
	"k8s.io/kubernetes/pkg/kubeapiserver"
	rbacrest "k8s.io/kubernetes/pkg/registry/rbac/rest"
)

// buildGenericConfig is upstream's controlplaneapiserver.BuildGenericConfig
// step for step but one: the loopback certificate. Upstream generates a
// self-signed RSA-2048 CA and serving key at every start, 0.15-0.2 s of
// one core and a quarter of an empty server's start, which nothing else
// can use meanwhile (the rest of the configuration waits for it); the
// loopback certificate here is ECDSA P-256 (loopbackcert.go), made in
// under a millisecond. TestBuildGenericConfigFollowsUpstream fails when
// upstream's function changes, so that this one is brought in step.
func buildGenericConfig(s options.CompletedOptions, schemes []*runtime.Scheme, resourceConfig *serverstorage.ResourceConfig,
	getOpenAPIDefinitions func(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition,
) (*genericapiserver.Config, clientgoinformers.SharedInformerFactory, *serverstorage.DefaultStorageFactory, error) {
	codecs := legacyscheme.Codecs
	if utilfeature.DefaultFeatureGate.Enabled(genericfeatures.CBORServingAndStorage) {
		codecs = serializer.NewCodecFactory(legacyscheme.Scheme, serializer.WithSerializer(cbor.NewSerializerInfo))
	}
	genericConfig := genericapiserver.NewConfig(codecs)
	genericConfig.Flagz = s.Flagz
	genericConfig.MergedResourceConfig = resourceConfig
	if err := s.GenericServerRunOptions.ApplyTo(genericConfig); err != nil {
		return nil, nil, nil, err
	}
	if err := applySecureServing(s.SecureServing.SecureServingOptions, genericConfig); err != nil {
		return nil, nil, nil, err
	}
	// As upstream: protobuf, uncompressed, for the server's own clients.
	genericConfig.LoopbackClientConfig.ContentConfig.ContentType = "application/vnd.kubernetes.protobuf"
	genericConfig.LoopbackClientConfig.DisableCompression = true
	client, err := clientgoclientset.NewForConfig(genericConfig.LoopbackClientConfig)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("failed to create real external clientset: %w", err)
	}
	trim := func(obj interface{}) (interface{}, error) {
		if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
			accessor.SetManagedFields(nil)
		}
		return obj, nil
	}
	informers := clientgoinformers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, clientgoinformers.WithTransform(trim))
	if err := s.Features.ApplyTo(genericConfig, client, informers); err != nil {
		return nil, nil, nil, err
	}
	if err := s.APIEnablement.ApplyTo(genericConfig, resourceConfig, legacyscheme.Scheme); err != nil {
		return nil, nil, nil, err
	}
	if err := s.EgressSelector.ApplyTo(genericConfig); err != nil {
		return nil, nil, nil, err
	}
	if err := s.Traces.ApplyTo(genericConfig.EgressSelector, genericConfig); err != nil {
		return nil, nil, nil, err
	}
	applyOpenAPIConfig(genericConfig, schemes, getOpenAPIDefinitions)
	genericConfig.LongRunningFunc = filters.BasicLongRunningRequestCheck(
		sets.NewString("watch", "proxy"),
		sets.NewString("attach", "exec", "proxy", "log", "portforward"),
	)
	storageFactory, err := newStorageFactory(s, genericConfig)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := applyAccessControl(s, genericConfig, client, informers); err != nil {
		return nil, nil, nil, err
	}
	genericConfig.AggregatedDiscoveryGroupManager = aggregated.NewResourceManager("apis")
	return genericConfig, informers, storageFactory, nil
}

// applyOpenAPIConfig is upstream's OpenAPI configuration: definitions
// without the disabled features', titled "Kubernetes".
func applyOpenAPIConfig(genericConfig *genericapiserver.Config, schemes []*runtime.Scheme,
	getOpenAPIDefinitions func(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition,
) {
	getOpenAPIDefinitions = openapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(getOpenAPIDefinitions)
	namer := openapinamer.NewDefinitionNamer(schemes...)
	genericConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(getOpenAPIDefinitions, namer)
	genericConfig.OpenAPIConfig.Info.Title = "Kubernetes"
	genericConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(getOpenAPIDefinitions, namer)
	genericConfig.OpenAPIV3Config.Info.Title = "Kubernetes"
	// Left nil, the first builder of each document fills it in with a
	// closure over itself, and the builder's map of every type's
	// definition then lives as long as the configuration: after
	// narrowDefinitions, 6.4 MiB of an empty generic server's heap.
	genericConfig.OpenAPIConfig.GetOperationIDAndTagsFromRoute = operationIDAndTags
	genericConfig.OpenAPIV3Config.GetOperationIDAndTagsFromRoute = operationIDAndTags
}

// operationIDAndTags is upstream's operation id and tags of a go-restful
// route, for the OpenAPI builders.
func operationIDAndTags(r openapicommon.Route) (string, []string, error) {
	route, ok := r.(*restfuladapter.RouteAdapter)
	if !ok {
		return "", nil, fmt.Errorf("route %s %s is not a go-restful route", r.Method(), r.Path())
	}
	return openapinamer.GetOperationIDAndTags(route.Route)
}

// newStorageFactory is upstream's storage factory for s.Etcd, applied to
// genericConfig.
func newStorageFactory(s options.CompletedOptions, genericConfig *genericapiserver.Config) (*serverstorage.DefaultStorageFactory, error) {
	if genericConfig.EgressSelector != nil {
		s.Etcd.StorageConfig.Transport.EgressLookup = genericConfig.EgressSelector.Lookup
	}
	s.Etcd.StorageConfig.Transport.TracerProvider = genericConfig.TracerProvider
	storageFactoryConfig := kubeapiserver.NewStorageFactoryConfigEffectiveVersion(genericConfig.EffectiveVersion)
	storageFactoryConfig.APIResourceConfig = genericConfig.MergedResourceConfig
	storageFactoryConfig.DefaultResourceEncoding.SetEffectiveVersion(genericConfig.EffectiveVersion)
	storageFactory, err := storageFactoryConfig.Complete(s.Etcd).New()
	if err != nil {
		return nil, err
	}
	// The factory copied the storage config before the object count
	// tracker was set on genericConfig's.
	storageFactory.StorageConfig.StorageObjectCountTracker = genericConfig.StorageObjectCountTracker
	if err := s.Etcd.ApplyWithStorageFactoryTo(storageFactory, genericConfig); err != nil {
		return nil, err
	}
	return storageFactory, nil
}

// applyAccessControl is upstream's authentication, authorization and
// audit configuration (kplane wraps the first two afterwards, configureAuth).
func applyAccessControl(s options.CompletedOptions, genericConfig *genericapiserver.Config, client clientgoclientset.Interface,
	informers clientgoinformers.SharedInformerFactory,
) error {
	ctx := wait.ContextForChannel(genericConfig.DrainedNotify())
	if err := s.Authentication.ApplyTo(ctx, &genericConfig.Authentication, genericConfig.SecureServing, genericConfig.EgressSelector,
		genericConfig.OpenAPIConfig, genericConfig.OpenAPIV3Config, client, informers, genericConfig.APIServerID); err != nil {
		return err
	}
	authorizer, ruleResolver, enablesRBAC, err := controlplaneapiserver.BuildAuthorizer(ctx, s, genericConfig.EgressSelector,
		genericConfig.APIServerID, informers)
	if err != nil {
		return fmt.Errorf("invalid authorization config: %w", err)
	}
	genericConfig.Authorization.Authorizer, genericConfig.RuleResolver = authorizer, ruleResolver
	if s.Authorization != nil && !enablesRBAC {
		genericConfig.DisabledPostStartHooks.Insert(rbacrest.PostStartHookName)
	}
	return s.Audit.ApplyTo(genericConfig)
}
