package webhooks

import (
	"context"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/apiserver/pkg/util/webhook"
	corelisters "k8s.io/client-go/listers/core/v1"

	planestorage "kplane.dev/kplane/planes/storage"
)

var (
	namespacesResource     = corev1.Resource("namespaces")
	servicesResource       = corev1.Resource("services")
	endpointSlicesResource = discoveryv1.Resource("endpointslices")
)

// namespaceLister is upstream's NamespaceLister over one plane's
// namespaces: what a namespaceSelector is matched against. A namespace the
// cache has not seen yet is read from the datastore, so a selector never
// misses a namespace created a moment ago.
type namespaceLister struct{ objects }

var _ corelisters.NamespaceLister = namespaceLister{}

func (l namespaceLister) List(selector labels.Selector) ([]*corev1.Namespace, error) {
	items, err := l.list(context.Background(), namespacesResource, "")
	if err != nil {
		return nil, err
	}
	return selected(items, selector, func() *corev1.Namespace { return &corev1.Namespace{} })
}

func (l namespaceLister) Get(name string) (*corev1.Namespace, error) {
	ctx := context.Background()
	obj, err := l.get(ctx, namespacesResource, "", name, fromCache)
	if apierrors.IsNotFound(err) {
		obj, err = l.get(ctx, namespacesResource, "", name, "")
	}
	if err != nil {
		return nil, err
	}
	return external(obj, &corev1.Namespace{})
}

// serviceLister is upstream's ServiceLister over one plane's Services,
// for upstream's endpoint resolution.
type serviceLister struct {
	objects
	namespace string
}

var (
	_ corelisters.ServiceLister          = serviceLister{}
	_ corelisters.ServiceNamespaceLister = serviceLister{}
)

func (l serviceLister) List(selector labels.Selector) ([]*corev1.Service, error) {
	items, err := l.list(context.Background(), servicesResource, l.namespace)
	if err != nil {
		return nil, err
	}
	return selected(items, selector, func() *corev1.Service { return &corev1.Service{} })
}

func (l serviceLister) Services(namespace string) corelisters.ServiceNamespaceLister {
	l.namespace = namespace
	return l
}

func (l serviceLister) Get(name string) (*corev1.Service, error) {
	obj, err := l.get(context.Background(), servicesResource, l.namespace, name, fromCache)
	if err != nil {
		return nil, err
	}
	return external(obj, &corev1.Service{})
}

// endpointSlices are one plane's EndpointSlices of a Service.
type endpointSlices struct{ objects }

var _ proxy.EndpointSliceGetter = endpointSlices{}

func (e endpointSlices) GetEndpointSlices(namespace, service string) ([]*discoveryv1.EndpointSlice, error) {
	items, err := e.list(context.Background(), endpointSlicesResource, namespace)
	if err != nil {
		return nil, err
	}
	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service})
	return selected(items, selector, func() *discoveryv1.EndpointSlice { return &discoveryv1.EndpointSlice{} })
}

// serviceResolver resolves a webhook's clientConfig.service through the
// plane's Service and EndpointSlices (upstream's ResolveEndpoint): a
// selector-less Service with an EndpointSlice naming a host address is how
// a webhook server running outside the server is reached.
type serviceResolver struct{ objects }

func (r serviceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	u, err := proxy.ResolveEndpoint(serviceLister{objects: r.objects}, endpointSlices{r.objects}, namespace, name, port)
	if err != nil {
		return nil, fmt.Errorf("resolving service %s/%s port %d in plane %s: %w", namespace, name, port, r.plane, err)
	}
	return u, nil
}

// selected converts the internal objects matching selector.
func selected[T interface {
	runtime.Object
	GetLabels() map[string]string
}](items []runtime.Object, selector labels.Selector, newT func() T) ([]T, error) {
	out := make([]T, 0, len(items))
	for _, item := range items {
		obj, err := external(item, newT())
		if err != nil {
			return nil, err
		}
		if selector == nil || selector.Matches(labels.Set(obj.GetLabels())) {
			out = append(out, obj)
		}
	}
	return out, nil
}

// NewServiceResolver resolves Services of plane through its Service and
// EndpointSlices in the shared watch caches of registry: conversion
// webhooks named by a Service reference are called this way.
func NewServiceResolver(registry *planestorage.Registry, plane string) webhook.ServiceResolver {
	return serviceResolver{objects{registry: registry, plane: plane}}
}
