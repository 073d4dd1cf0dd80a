package admission

import (
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/rest"
)

// WantsLoopback is a plugin that writes back into the plane of a request
// (ResourceQuota's usage): it gets the server's loopback configuration and
// makes the plane-routed client it needs of it.
type WantsLoopback interface {
	SetLoopback(*rest.Config)
}

// LoopbackInitializer hands plugins the server's loopback configuration.
// Upstream's initializers hand out clients, which cannot be routed to a
// plane.
type LoopbackInitializer struct {
	Config *rest.Config
}

var _ admission.PluginInitializer = LoopbackInitializer{}

// Initialize implements admission.PluginInitializer.
func (i LoopbackInitializer) Initialize(plugin admission.Interface) {
	if wants, ok := plugin.(WantsLoopback); ok {
		wants.SetLoopback(i.Config)
	}
}
