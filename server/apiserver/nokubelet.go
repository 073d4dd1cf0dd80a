package apiserver

import (
	"context"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	podrest "k8s.io/kubernetes/pkg/registry/core/pod/rest"
)

// A plane is an API, not a cluster: no node runs its pods. The subresources
// that would open a connection to a kubelet keep their upstream shape (so
// discovery, kubectl and clients see the usual API) but always answer with a
// clear error and never dial anything; a tenant-written Node address must
// never become a connection from the server.
func kubeletUnavailable(subresource string) error {
	return apierrors.NewBadRequest(fmt.Sprintf(
		"%s is not available: kplane planes serve the Kubernetes API only and run no kubelet, so there is no container to reach",
		subresource))
}

// connectStorage is the upstream shape of exec, attach, portforward and proxy.
type connectStorage interface {
	rest.Storage
	rest.Connecter
}

type noKubeletConnect struct {
	upstream    connectStorage
	subresource string
}

var _ rest.Connecter = noKubeletConnect{}

func (n noKubeletConnect) New() runtime.Object { return n.upstream.New() }
func (n noKubeletConnect) Destroy()            {}
func (n noKubeletConnect) ConnectMethods() []string {
	return n.upstream.ConnectMethods()
}
func (n noKubeletConnect) NewConnectOptions() (runtime.Object, bool, string) {
	return n.upstream.NewConnectOptions()
}
func (n noKubeletConnect) Connect(context.Context, string, runtime.Object, rest.Responder) (http.Handler, error) {
	return nil, kubeletUnavailable(n.subresource)
}

// noKubeletLog is pods/log.
type noKubeletLog struct {
	*podrest.LogREST
}

func (n noKubeletLog) Get(context.Context, string, runtime.Object) (runtime.Object, error) {
	return nil, kubeletUnavailable("pods/log")
}
