package apiserver

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	admissionregistrationrest "k8s.io/kubernetes/pkg/registry/admissionregistration/rest"
	apiserverinternalrest "k8s.io/kubernetes/pkg/registry/apiserverinternal/rest"
	appsrest "k8s.io/kubernetes/pkg/registry/apps/rest"
	authenticationrest "k8s.io/kubernetes/pkg/registry/authentication/rest"
	authorizationrest "k8s.io/kubernetes/pkg/registry/authorization/rest"
	autoscalingrest "k8s.io/kubernetes/pkg/registry/autoscaling/rest"
	batchrest "k8s.io/kubernetes/pkg/registry/batch/rest"
	certificatesrest "k8s.io/kubernetes/pkg/registry/certificates/rest"
	coordinationrest "k8s.io/kubernetes/pkg/registry/coordination/rest"
	discoveryrest "k8s.io/kubernetes/pkg/registry/discovery/rest"
	eventsrest "k8s.io/kubernetes/pkg/registry/events/rest"
	flowcontrolrest "k8s.io/kubernetes/pkg/registry/flowcontrol/rest"
	networkingrest "k8s.io/kubernetes/pkg/registry/networking/rest"
	noderest "k8s.io/kubernetes/pkg/registry/node/rest"
	policyrest "k8s.io/kubernetes/pkg/registry/policy/rest"
	rbacrest "k8s.io/kubernetes/pkg/registry/rbac/rest"
	schedulingrest "k8s.io/kubernetes/pkg/registry/scheduling/rest"
	storagerest "k8s.io/kubernetes/pkg/registry/storage/rest"
	storagemigrationrest "k8s.io/kubernetes/pkg/registry/storagemigration/rest"
)

// storageProviders lists the API groups every plane serves, in discovery
// order (the same order as kube-apiserver, the aggregator's APIServices
// last). Left out: resource (DRA needs a scheduler and kubelets).
//
// FlowSchemas and PriorityLevelConfigurations are plane objects that
// configure nothing: the server's own fairness is max-in-flight, the same
// for every plane. StorageVersionMigrations are stored; no migration
// controller acts on them (a plane's objects are always written in the
// storage version of the server that serves them).
//
// The generic profile installs only the providers of the groups it serves
// (Profile.servesGroup): the others would build no storage under its
// resource config, but are not even constructed.
func storageProviders(c controlplaneapiserver.CompletedConfig, profile Profile, core *coreProvider,
	apiServices apiRegistrationProvider) ([]controlplaneapiserver.RESTStorageProvider, error) {
	all, err := allStorageProviders(c, profile, core, apiServices)
	if err != nil {
		return nil, err
	}
	served := make([]controlplaneapiserver.RESTStorageProvider, 0, len(all))
	for _, p := range all {
		if profile.servesGroup(p.GroupName()) {
			served = append(served, p)
		}
	}
	return served, nil
}

// allStorageProviders are the providers of the full profile.
func allStorageProviders(c controlplaneapiserver.CompletedConfig, profile Profile, core *coreProvider, apiServices apiRegistrationProvider) ([]controlplaneapiserver.RESTStorageProvider, error) {
	client, err := kubernetes.NewForConfig(c.Generic.LoopbackClientConfig)
	if err != nil {
		return nil, fmt.Errorf("loopback client: %w", err)
	}
	authz := c.Generic.Authorization.Authorizer
	return []controlplaneapiserver.RESTStorageProvider{
		core,
		apiserverinternalrest.StorageProvider{},
		planeTokenReviews{authenticationrest.RESTStorageProvider{Authenticator: c.Generic.Authentication.Authenticator, APIAudiences: c.Generic.Authentication.APIAudiences}},
		authorizationrest.RESTStorageProvider{Authorizer: authz, RuleResolver: c.Generic.RuleResolver},
		autoscalingrest.RESTStorageProvider{},
		batchrest.RESTStorageProvider{},
		// Generic: no PodCertificateRequests, as upstream's generic control plane.
		certificatesrest.RESTStorageProvider{Authorizer: authz, Generic: profile.Generic()},
		coordinationrest.RESTStorageProvider{},
		discoveryrest.StorageProvider{},
		networkingrest.RESTStorageProvider{},
		noderest.RESTStorageProvider{},
		policyrest.RESTStorageProvider{},
		withoutPostStartHook{rbacrest.RESTStorageProvider{Authorizer: authz}},
		withoutPostStartHook{schedulingrest.RESTStorageProvider{}},
		storagerest.RESTStorageProvider{},
		storagemigrationrest.RESTStorageProvider{},
		// Its hook seeds the APF configuration of one cluster through
		// informers of the root plane; planes/bootstrap writes it per plane.
		withoutPostStartHook{flowcontrolrest.RESTStorageProvider{}},
		appsrest.StorageProvider{},
		admissionregistrationrest.RESTStorageProvider{Authorizer: authz, DiscoveryClient: client.Discovery()},
		eventsrest.RESTStorageProvider{TTL: c.EventTTL},
		apiServices,
	}, nil
}

// withoutPostStartHook installs a group without the upstream post-start
// hook that seeds it for one cluster; kplane seeds every plane itself.
type withoutPostStartHook struct {
	controlplaneapiserver.RESTStorageProvider
}
