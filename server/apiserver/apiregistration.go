package apiserver

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationv1beta1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1beta1"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	apiservicestorage "k8s.io/kube-aggregator/pkg/registry/apiservice/etcd"
)

// apiRegistrationProvider serves apiregistration.k8s.io/v1 in every plane
// with the aggregator's own registry. APIServices are stored and listed;
// nothing is proxied to an aggregated server (kplane runs no aggregator),
// and their Available condition says so.
type apiRegistrationProvider struct {
	// getter stores APIServices with the aggregator's codec on plane-scoped
	// storage.
	getter generic.RESTOptionsGetter
}

func (apiRegistrationProvider) GroupName() string { return apiregistration.GroupName }

func (p apiRegistrationProvider) NewRESTStorage(serverstorage.APIResourceConfigSource, generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info := genericapiserver.NewDefaultAPIGroupInfo(apiregistration.GroupName, aggregatorscheme.Scheme,
		metav1.ParameterCodec, aggregatorscheme.Codecs)
	// The aggregator's defaults: kube-apiserver's resource config does not
	// know this group.
	if !aggregatorapiserver.DefaultAPIResourceConfigSource().ResourceEnabled(apiregistrationv1.SchemeGroupVersion.WithResource("apiservices")) {
		return info, nil
	}
	apiServices := apiservicestorage.NewREST(aggregatorscheme.Scheme, p.getter)
	// The strategies are wrapped before the status registry copies the store.
	apiServices.CreateStrategy = availableOnCreate{apiServices.CreateStrategy}
	apiServices.UpdateStrategy = availableOnUpdate{apiServices.UpdateStrategy}
	status := availableStatusREST{apiservicestorage.NewStatusREST(aggregatorscheme.Scheme, apiServices)}
	info.VersionedResourcesStorageMap[apiregistrationv1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"apiservices":        apiServices,
		"apiservices/status": status,
	}
	return info, nil
}

// apiRegistrationGetter is the storage getter of APIServices: the server's
// etcd settings with the aggregator's codec (as kube-apiserver configures
// its aggregator), on plane-scoped storage.
func (c CompletedConfig) apiRegistrationGetter() generic.RESTOptionsGetter {
	etcd := *c.options.Etcd
	etcd.StorageConfig.Codec = aggregatorscheme.Codecs.LegacyCodec(apiregistrationv1.SchemeGroupVersion, apiregistrationv1beta1.SchemeGroupVersion)
	etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(apiregistrationv1.SchemeGroupVersion,
		schema.GroupKind{Group: apiregistrationv1beta1.GroupName})
	if etcd.StorageConfig.StorageObjectCountTracker == nil {
		etcd.StorageConfig.StorageObjectCountTracker = c.controlPlane.Generic.StorageObjectCountTracker
	}
	factory := &genericoptions.SimpleStorageFactory{StorageConfig: etcd.StorageConfig}
	return c.storage.Wrap(etcd.CreateRESTOptionsGetter(factory, c.controlPlane.Generic.ResourceTransformers))
}

// notProxiedReason is the Available=False reason of an APIService that
// names a Service: upstream's availability controller would probe it,
// kplane never calls it.
const notProxiedReason = "NotProxied"

// setAvailable keeps the Available condition as upstream's availability
// controllers would settle it in a cluster without an aggregator: a local
// APIService (no spec.service) is served by the server itself; any other
// is never reached. The server owns the condition, so a client's write to it
// is overwritten, as the controllers would do moments later.
func setAvailable(svc *apiregistration.APIService, spec apiregistration.APIServiceSpec) {
	if spec.Service == nil {
		apiregistration.SetAPIServiceCondition(svc, apiregistration.NewLocalAvailableAPIServiceCondition())
		return
	}
	apiregistration.SetAPIServiceCondition(svc, apiregistration.APIServiceCondition{
		Type:               apiregistration.Available,
		Status:             apiregistration.ConditionFalse,
		LastTransitionTime: metav1.Now(),
		Reason:             notProxiedReason,
		Message: fmt.Sprintf("kplane does not proxy to aggregated API servers: requests for %s/%s are not forwarded to service %s/%s",
			spec.Group, spec.Version, spec.Service.Namespace, spec.Service.Name),
	})
}

type availableOnCreate struct{ rest.RESTCreateStrategy }

func (s availableOnCreate) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.RESTCreateStrategy.PrepareForCreate(ctx, obj)
	svc := obj.(*apiregistration.APIService)
	setAvailable(svc, svc.Spec)
}

type availableOnUpdate struct{ rest.RESTUpdateStrategy }

func (s availableOnUpdate) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	s.RESTUpdateStrategy.PrepareForUpdate(ctx, obj, old)
	svc := obj.(*apiregistration.APIService)
	setAvailable(svc, svc.Spec)
}

// availableStatusREST is upstream's status registry; its updates keep the
// Available condition the server's (the spec, and so the answer, cannot
// change through status).
type availableStatusREST struct{ *apiservicestorage.StatusREST }

func (r availableStatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo,
	createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc,
	forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.StatusREST.Update(ctx, name, availableUpdate{objInfo}, createValidation, updateValidation, forceAllowCreate, options)
}

type availableUpdate struct{ rest.UpdatedObjectInfo }

func (u availableUpdate) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	obj, err := u.UpdatedObjectInfo.UpdatedObject(ctx, old)
	if err != nil {
		return nil, err
	}
	svc, ok := obj.(*apiregistration.APIService)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T in an APIService status update", obj)
	}
	if prev, ok := old.(*apiregistration.APIService); ok {
		setAvailable(svc, prev.Spec)
	}
	return svc, nil
}
