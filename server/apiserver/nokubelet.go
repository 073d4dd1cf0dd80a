package apiserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"
	podrest "k8s.io/kubernetes/pkg/registry/core/pod/rest"

	"kplane.dev/kplane/planes/simulation/kubelet"
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

// Get answers the log of a container the workload simulation started
// (planes/simulation/kubelet.Log); any other pod has no kubelet to ask.
func (n noKubeletLog) Get(ctx context.Context, name string, opts runtime.Object) (runtime.Object, error) {
	obj, err := n.Store.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pod, ok := obj.(*api.Pod)
	if !ok {
		return nil, kubeletUnavailable("pods/log")
	}
	logOpts, _ := opts.(*api.PodLogOptions)
	text, simulated, err := kubelet.Log(pod, logOpts)
	switch {
	case !simulated:
		return nil, kubeletUnavailable("pods/log")
	case err != nil:
		return nil, err
	}
	if logOpts == nil || !logOpts.Follow {
		return &simulatedLog{text: text}, nil
	}
	container, err := kubelet.Container(pod, logOpts.Container)
	if err != nil {
		// Not running (any more): the log so far is all there is.
		return &simulatedLog{text: text}, nil
	}
	// Follow until the container ends: watch the pod from the state read.
	w, err := n.Store.Watch(ctx, &metainternalversion.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name), ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		return nil, err
	}
	return &simulatedLog{text: text, follow: &untilTerminated{watch: w, container: container}}, nil
}

// simulatedLog streams a simulated container's log as text; when it
// follows, the stream stays open until the container terminates.
type simulatedLog struct {
	text   string
	follow *untilTerminated
}

var _ rest.ResourceStreamer = &simulatedLog{}

func (l *simulatedLog) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (l *simulatedLog) DeepCopyObject() runtime.Object   { c := *l; return &c }
func (l *simulatedLog) InputStream(context.Context, string, string) (io.ReadCloser, bool, string, error) {
	if l.follow == nil {
		return io.NopCloser(strings.NewReader(l.text)), false, "text/plain", nil
	}
	return followed{Reader: io.MultiReader(strings.NewReader(l.text), l.follow), stop: l.follow.watch.Stop},
		true, "text/plain", nil
}

type followed struct {
	io.Reader
	stop func()
}

func (f followed) Close() error { f.stop(); return nil }

// untilTerminated reads nothing and ends (io.EOF) once its pod's
// container has terminated, the pod is gone, or the watch ends (the
// client left or the request timed out).
type untilTerminated struct {
	watch     watch.Interface
	container string
}

func (u *untilTerminated) Read([]byte) (int, error) {
	for ev := range u.watch.ResultChan() {
		if ev.Type == watch.Deleted || ev.Type == watch.Error {
			break
		}
		obj := ev.Object
		if c, ok := obj.(runtime.CacheableObject); ok {
			// The watch cache wraps what it sends.
			obj = c.GetObject()
		}
		pod, ok := obj.(*api.Pod)
		if !ok {
			continue
		}
		if pod.Status.Phase == api.PodSucceeded || pod.Status.Phase == api.PodFailed || terminated(pod, u.container) {
			break
		}
	}
	u.watch.Stop()
	return 0, io.EOF
}

func terminated(pod *api.Pod, container string) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == container {
			return s.State.Terminated != nil
		}
	}
	return false
}
