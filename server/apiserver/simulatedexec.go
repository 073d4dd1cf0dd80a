package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	api "k8s.io/kubernetes/pkg/apis/core"
	podrest "k8s.io/kubernetes/pkg/registry/core/pod/rest"

	"kplane.dev/kplane/planes/simulation/kubelet"
)

// simulatedExec is pods/exec: a container the workload simulation started
// answers from its in-memory shell (kubelet.Shell); any other pod has no
// kubelet to reach and gets the usual clear error. Nothing is dialled.
type simulatedExec struct {
	*podrest.ExecREST
	objects kubelet.Objects
}

var _ rest.Connecter = simulatedExec{}

// The kubelet's streaming defaults: an idle exec session ends after 4
// hours, a client has 30 s to open its streams.
const (
	execIdleTimeout           = 4 * time.Hour
	execStreamCreationTimeout = 30 * time.Second
)

func (e simulatedExec) Connect(ctx context.Context, name string, opts runtime.Object, _ rest.Responder) (http.Handler, error) {
	execOpts, ok := opts.(*api.PodExecOptions)
	if !ok {
		return nil, fmt.Errorf("invalid options object: %#v", opts)
	}
	obj, err := e.Store.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pod, ok := obj.(*api.Pod)
	if !ok {
		return nil, kubeletUnavailable("pods/exec")
	}
	container, err := kubelet.Container(pod, execOpts.Container)
	if errors.Is(err, kubelet.ErrNotSimulated) {
		return nil, kubeletUnavailable("pods/exec")
	}
	if err != nil {
		return nil, err
	}
	shell := kubelet.Shell{Pod: pod, Objects: e.objects}
	streams := &remotecommand.Options{
		Stdin: execOpts.Stdin, Stdout: execOpts.Stdout, Stderr: execOpts.Stderr, TTY: execOpts.TTY,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		remotecommand.ServeExec(w, req, shell, pod.Name, string(pod.UID), container, execOpts.Command, streams,
			execIdleTimeout, execStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	}), nil
}

// podObjects reads a plane's ConfigMaps and Secrets through their
// registries, for the simulated shell.
type podObjects struct {
	configMaps, secrets rest.Getter
}

func (o podObjects) ConfigMap(ctx context.Context, namespace, name string) (*api.ConfigMap, error) {
	if o.configMaps == nil {
		return nil, fmt.Errorf("configmaps are not served")
	}
	obj, err := o.configMaps.Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cm, ok := obj.(*api.ConfigMap)
	if !ok {
		return nil, fmt.Errorf("configmap %s/%s: unexpected %T", namespace, name, obj)
	}
	return cm, nil
}

func (o podObjects) Secret(ctx context.Context, namespace, name string) (*api.Secret, error) {
	if o.secrets == nil {
		return nil, fmt.Errorf("secrets are not served")
	}
	obj, err := o.secrets.Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	secret, ok := obj.(*api.Secret)
	if !ok {
		return nil, fmt.Errorf("secret %s/%s: unexpected %T", namespace, name, obj)
	}
	return secret, nil
}
