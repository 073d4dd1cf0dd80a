package apiserver

import (
	"context"
	"fmt"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/controlplane/controller/clusterauthenticationtrust"
)

// clusterAuthenticationInfoHook is upstream's post-start hook that runs
// the controller publishing the server's client CAs in the root plane's
// kube-system/extension-apiserver-authentication. kplane runs the same
// controller as in-process work instead (addClusterAuthenticationInfo):
// started by upstream's hook it stopped only once the server had stopped
// listening, and its informer, watching again when the stop ended its
// watch, was refused "apiserver is shutting down".
const clusterAuthenticationInfoHook = "start-cluster-authentication-info-controller"

// addClusterAuthenticationInfo runs upstream's cluster authentication
// trust controller as upstream's hook does, as in-process work: it stops
// before the server stops accepting requests.
func (c CompletedConfig) addClusterAuthenticationInfo(server *genericapiserver.GenericAPIServer, s components) error {
	client, err := kubernetes.NewForConfig(s.loopback)
	if err != nil {
		return fmt.Errorf("cluster authentication info: %w", err)
	}
	info := c.controlPlane.Extra.ClusterAuthenticationInfo
	work := s.work
	return server.AddPostStartHook("kplane-cluster-authentication-info", func(hook genericapiserver.PostStartHookContext) error {
		controller := clusterauthenticationtrust.NewClusterAuthenticationTrustController(info, client)
		for _, ca := range []dynamiccertificates.CAContentProvider{info.ClientCA, info.RequestHeaderCA} {
			if ca == nil {
				continue
			}
			ca.AddListener(controller)
			if runner, ok := ca.(dynamiccertificates.ControllerRunner); ok {
				// Once first, so that the controller starts from the CA.
				if err := runner.RunOnce(hook); err != nil {
					utilruntime.HandleError(err)
				}
				work.Go(hook, func(ctx context.Context) { runner.Run(ctx, 1) })
			}
		}
		work.Go(hook, func(ctx context.Context) { controller.Run(ctx, 1) })
		return nil
	})
}
