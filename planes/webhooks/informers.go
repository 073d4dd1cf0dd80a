package webhooks

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/admissionregistration"
	admissionregistrationv1informers "k8s.io/client-go/informers/admissionregistration/v1"
	"k8s.io/client-go/informers/core"
	corev1informers "k8s.io/client-go/informers/core/v1"
	admissionregistrationlisters "k8s.io/client-go/listers/admissionregistration/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// planeInformers is the informer factory one plane's upstream webhook
// plugin is initialized with. Upstream's plugin reads its configurations
// and namespaces through a SharedInformerFactory and nothing else; here
// they come from the shared watch caches: the configurations are the fixed
// set the plugin instance was built for (a changed set builds a new
// instance), the namespaces are read from the cache at each lookup. No
// informer runs: the embedded interfaces are nil and upstream's webhook
// plugins call only the methods below (a call to any other panics, which
// the package's tests would show).
type planeInformers struct {
	informers.SharedInformerFactory
	namespaces corelisters.NamespaceLister
	validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	mutating   []*admissionregistrationv1.MutatingWebhookConfiguration
}

func (f *planeInformers) Core() core.Interface { return coreGroup{f: f} }

func (f *planeInformers) Admissionregistration() admissionregistration.Interface {
	return admissionGroup{f: f}
}

type coreGroup struct {
	core.Interface
	f *planeInformers
}

func (g coreGroup) V1() corev1informers.Interface { return coreV1{f: g.f} }

type coreV1 struct {
	corev1informers.Interface
	f *planeInformers
}

func (c coreV1) Namespaces() corev1informers.TypedNamespaceInformer {
	return namespaceInformer{lister: c.f.namespaces}
}

type namespaceInformer struct {
	corev1informers.TypedNamespaceInformer
	lister corelisters.NamespaceLister
}

func (n namespaceInformer) Informer() cache.SharedIndexInformer { return synced{} }
func (n namespaceInformer) Lister() corelisters.NamespaceLister { return n.lister }

type admissionGroup struct {
	admissionregistration.Interface
	f *planeInformers
}

func (g admissionGroup) V1() admissionregistrationv1informers.Interface { return admissionV1{f: g.f} }

type admissionV1 struct {
	admissionregistrationv1informers.Interface
	f *planeInformers
}

func (a admissionV1) ValidatingWebhookConfigurations() admissionregistrationv1informers.TypedValidatingWebhookConfigurationInformer {
	indexer := fixedIndexer(a.f.validating)
	return validatingInformer{lister: admissionregistrationlisters.NewValidatingWebhookConfigurationLister(indexer)}
}

func (a admissionV1) MutatingWebhookConfigurations() admissionregistrationv1informers.TypedMutatingWebhookConfigurationInformer {
	indexer := fixedIndexer(a.f.mutating)
	return mutatingInformer{lister: admissionregistrationlisters.NewMutatingWebhookConfigurationLister(indexer)}
}

type validatingInformer struct {
	admissionregistrationv1informers.TypedValidatingWebhookConfigurationInformer
	lister admissionregistrationlisters.ValidatingWebhookConfigurationLister
}

func (i validatingInformer) Informer() cache.SharedIndexInformer { return synced{} }
func (i validatingInformer) Lister() admissionregistrationlisters.ValidatingWebhookConfigurationLister {
	return i.lister
}

type mutatingInformer struct {
	admissionregistrationv1informers.TypedMutatingWebhookConfigurationInformer
	lister admissionregistrationlisters.MutatingWebhookConfigurationLister
}

func (i mutatingInformer) Informer() cache.SharedIndexInformer { return synced{} }
func (i mutatingInformer) Lister() admissionregistrationlisters.MutatingWebhookConfigurationLister {
	return i.lister
}

// fixedIndexer is an indexer holding items, for upstream's listers.
func fixedIndexer[T any](items []T) cache.Indexer {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, item := range items {
		// Keys of named objects cannot fail.
		_ = indexer.Add(item)
	}
	return indexer
}

// synced is an informer that has always synced and never sends an event:
// its content is fixed.
type synced struct{ cache.SharedIndexInformer }

func (synced) HasSynced() bool { return true }

func (synced) AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return syncedRegistration{}, nil
}

type syncedRegistration struct {
	cache.ResourceEventHandlerRegistration
}

func (syncedRegistration) HasSynced() bool { return true }
