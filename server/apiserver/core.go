package apiserver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	admissionregistrationv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	policyclient "k8s.io/client-go/kubernetes/typed/policy/v1"
	restclient "k8s.io/client-go/rest"
	kubeletclient "k8s.io/kubernetes/pkg/kubelet/client"
	endpointsstore "k8s.io/kubernetes/pkg/registry/core/endpoint/storage"
	limitrangestore "k8s.io/kubernetes/pkg/registry/core/limitrange/storage"
	nodestore "k8s.io/kubernetes/pkg/registry/core/node/storage"
	pvstore "k8s.io/kubernetes/pkg/registry/core/persistentvolume/storage"
	pvcstore "k8s.io/kubernetes/pkg/registry/core/persistentvolumeclaim/storage"
	podstore "k8s.io/kubernetes/pkg/registry/core/pod/storage"
	podtemplatestore "k8s.io/kubernetes/pkg/registry/core/podtemplate/storage"
	controllerstore "k8s.io/kubernetes/pkg/registry/core/replicationcontroller/storage"
	corerest "k8s.io/kubernetes/pkg/registry/core/rest"
	serviceaccountstore "k8s.io/kubernetes/pkg/registry/core/serviceaccount/storage"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kplane.dev/kplane/planes/services"
)

// coreProvider serves the legacy core group ("/api/v1") in every plane. It
// is the upstream core provider minus what cannot be plane-scoped as is:
// Services get plane-scoped address allocation, the kubelet subresources
// answer a clear error, and the upstream repair loops (which assume one
// cluster) are not run.
type coreProvider struct {
	generic *corerest.GenericConfig
	// loopback routes each call to the plane of its context.
	loopback   *restclient.Config
	authorizer authorizer.Authorizer
	services   services.Config
	// workloads serves pods, nodes and services (the full profile).
	workloads bool

	// set by NewRESTStorage for the plane glue that needs the registries.
	registries *CoreRegistries
	// budgets is the eviction's PodDisruptionBudget client.
	budgets *planeBudgets
}

// CoreRegistries exposes the core registries other plane glue writes
// through (bootstrap, admission).
type CoreRegistries struct {
	Namespaces NamespaceRegistry
	// Services is nil when the profile serves no Services.
	Services        *services.REST
	ServiceAccounts rest.Getter
	Pods            rest.Getter
	Secrets         rest.Getter
	Nodes           rest.Getter
}

// NamespaceRegistry is what the plane glue needs of the namespace registry.
type NamespaceRegistry interface {
	rest.Getter
	rest.Creater
	rest.Lister
}

var _ interface {
	GroupName() string
	NewRESTStorage(serverstorage.APIResourceConfigSource, generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error)
} = &coreProvider{}

func (p *coreProvider) GroupName() string { return corev1.GroupName }

func (p *coreProvider) NewRESTStorage(resources serverstorage.APIResourceConfigSource, optsGetter generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info, err := p.generic.NewRESTStorage(resources, optsGetter)
	if err != nil {
		return info, err
	}
	storage := info.VersionedResourcesStorageMap["v1"]
	if storage == nil {
		storage = map[string]rest.Storage{}
	}
	enabled := func(resource string) bool {
		return resources.ResourceEnabled(corev1.SchemeGroupVersion.WithResource(resource))
	}
	// Without workloads (the generic profile) a service-account token
	// cannot be bound to a pod or a node: there are none, as in upstream's
	// generic control plane.
	registries := &CoreRegistries{
		Pods:  notServedGetter{corev1.Resource("pods")},
		Nodes: notServedGetter{corev1.Resource("nodes")},
	}
	if p.workloads {
		if err := p.addWorkloads(storage, enabled, optsGetter, registries); err != nil {
			return info, err
		}
	}
	if err := addUpstreamCore(storage, enabled, optsGetter); err != nil {
		return info, err
	}
	if enabled("serviceaccounts") && p.generic.ServiceAccountIssuer != nil {
		if err := p.replaceServiceAccounts(storage, optsGetter, registries.Pods, registries.Nodes); err != nil {
			return info, err
		}
	}
	info.VersionedResourcesStorageMap["v1"] = storage

	namespaces, ok := storage["namespaces"].(NamespaceRegistry)
	if !ok {
		return info, fmt.Errorf("namespaces registry is not served; every plane needs it")
	}
	registries.Namespaces = namespaces
	registries.ServiceAccounts, _ = storage["serviceaccounts"].(rest.Getter)
	registries.Secrets, _ = storage["secrets"].(rest.Getter)
	p.registries = registries
	return info, nil
}

// addWorkloads serves the core resources of the full profile that need
// nodes, pods or the network: pods, bindings, nodes and services.
func (p *coreProvider) addWorkloads(storage map[string]rest.Storage, enabled func(string) bool, optsGetter generic.RESTOptionsGetter,
	registries *CoreRegistries) error {
	nodes, pods, err := p.nodesAndPods(optsGetter)
	if err != nil {
		return err
	}
	p.services.Pods = pods.Pod
	svc, svcStatus, err := services.NewREST(optsGetter, p.services)
	if err != nil {
		return fmt.Errorf("services: %w", err)
	}
	if enabled("pods") {
		addPods(storage, pods, p.budgets)
	}
	if enabled("bindings") {
		storage["bindings"] = pods.LegacyBinding
	}
	if enabled("nodes") {
		storage["nodes"] = nodes.Node
		storage["nodes/status"] = nodes.Status
		storage["nodes/proxy"] = noKubeletConnect{nodes.Proxy, "nodes/proxy"}
	}
	if enabled("services") {
		storage["services"] = svc
		storage["services/status"] = svcStatus
	}
	registries.Pods, registries.Nodes, registries.Services = pods.Pod.Store, nodes.Node.Store, svc
	return nil
}

// notServedGetter is a resource the profile does not serve: every object
// of it is not found.
type notServedGetter struct{ resource schema.GroupResource }

func (g notServedGetter) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return nil, apierrors.NewNotFound(g.resource, name)
}

// nodesAndPods builds the node and pod registries (pods need nodes for
// their kubelet connection info).
func (p *coreProvider) nodesAndPods(optsGetter generic.RESTOptionsGetter) (*nodestore.NodeStorage, *podstore.PodStorage, error) {
	pdbClient, err := policyclient.NewForConfig(p.loopback)
	if err != nil {
		return nil, nil, err
	}
	nodes, err := nodestore.NewStorage(optsGetter, kubeletclient.KubeletClientConfig{Port: 10250, HTTPTimeout: 5 * time.Second}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("nodes: %w", err)
	}
	p.budgets = &planeBudgets{client: pdbClient}
	pods, err := podstore.NewStorage(optsGetter, nodes.KubeletConnectionInfo, nil, p.budgets, p.authorizer)
	if err != nil {
		return nil, nil, fmt.Errorf("pods: %w", err)
	}
	return nodes, &pods, nil
}

// addPods serves pods and their subresources: logs and exec of simulated
// containers are answered from memory, the rest a kubelet would answer
// give a clear error. ConfigMaps and Secrets are served already (the
// generic core registries), for the simulated shell.
func addPods(storage map[string]rest.Storage, pods *podstore.PodStorage, budgets *planeBudgets) {
	storage["pods"] = pods.Pod
	storage["pods/status"] = pods.Status
	storage["pods/binding"] = pods.Binding
	storage["pods/eviction"] = planeEviction{EvictionREST: pods.Eviction, budgets: budgets}
	storage["pods/ephemeralcontainers"] = pods.EphemeralContainers
	if pods.Resize != nil {
		storage["pods/resize"] = pods.Resize
	}
	storage["pods/log"] = noKubeletLog{pods.Log}
	configMaps, _ := storage["configmaps"].(rest.Getter)
	secrets, _ := storage["secrets"].(rest.Getter)
	storage["pods/exec"] = simulatedExec{ExecREST: pods.Exec, objects: podObjects{configMaps: configMaps, secrets: secrets}}
	storage["pods/attach"] = noKubeletConnect{pods.Attach, "pods/attach"}
	storage["pods/portforward"] = noKubeletConnect{pods.PortForward, "pods/portforward"}
	storage["pods/proxy"] = noKubeletConnect{pods.Proxy, "pods/proxy"}
}

// addUpstreamCore serves the core resources that are plane-safe as
// upstream builds them.
func addUpstreamCore(storage map[string]rest.Storage, enabled func(string) bool, optsGetter generic.RESTOptionsGetter) error {
	var err error
	if enabled("podtemplates") {
		if storage["podtemplates"], err = podtemplatestore.NewREST(optsGetter); err != nil {
			return err
		}
	}
	if enabled("limitranges") {
		if storage["limitranges"], err = limitrangestore.NewREST(optsGetter); err != nil {
			return err
		}
	}
	if enabled("endpoints") {
		if storage["endpoints"], err = endpointsstore.NewREST(optsGetter); err != nil {
			return err
		}
	}
	if enabled("persistentvolumes") {
		pv, pvStatus, err := pvstore.NewREST(optsGetter)
		if err != nil {
			return err
		}
		storage["persistentvolumes"], storage["persistentvolumes/status"] = pv, pvStatus
	}
	if enabled("persistentvolumeclaims") {
		pvc, pvcStatus, err := pvcstore.NewREST(optsGetter)
		if err != nil {
			return err
		}
		storage["persistentvolumeclaims"], storage["persistentvolumeclaims/status"] = pvc, pvcStatus
	}
	if enabled("replicationcontrollers") {
		rc, err := controllerstore.NewStorage(optsGetter)
		if err != nil {
			return err
		}
		storage["replicationcontrollers"] = rc.Controller
		storage["replicationcontrollers/status"] = rc.Status
		storage["replicationcontrollers/scale"] = rc.Scale
	}
	return nil
}

// replaceServiceAccounts swaps the generic core config's service accounts,
// served without pod-bound tokens, for the registry that knows pods and
// secrets, as kube-apiserver does.
func (p *coreProvider) replaceServiceAccounts(storage map[string]rest.Storage, optsGetter generic.RESTOptionsGetter,
	pods, nodes rest.Getter) error {
	webhookClient, err := admissionregistrationv1client.NewForConfig(p.loopback)
	if err != nil {
		return err
	}
	secrets, _ := storage["secrets"].(rest.Getter)
	sa, err := serviceaccountstore.NewREST(optsGetter, p.generic.ServiceAccountIssuer, p.generic.APIAudiences, p.authorizer,
		p.generic.ServiceAccountMaxExpiration, pods, secrets, nodes,
		webhookClient.ValidatingWebhookConfigurations(), webhookClient.MutatingWebhookConfigurations(),
		p.generic.ExtendExpiration, p.generic.MaxExtendedExpiration)
	if err != nil {
		return err
	}
	storage["serviceaccounts"].Destroy()
	storage["serviceaccounts"] = sa
	if sa.Token != nil {
		storage["serviceaccounts/token"] = sa.Token
	}
	return nil
}
