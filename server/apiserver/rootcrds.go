package apiserver

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	restclient "k8s.io/client-go/rest"

	"kplane.dev/kplane/manifests"
)

// installRootCRDs creates or updates kplane's own CRDs (manifests/crds) in
// the root plane, so that the API is simply there once the server is ready.
func installRootCRDs(ctx context.Context, loopback *restclient.Config) error {
	client, err := apiextensionsclient.NewForConfig(loopback)
	if err != nil {
		return err
	}
	crds, err := manifests.CRDs()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			existing, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
			case err == nil:
				updated := existing.DeepCopy()
				updated.Spec = crd.Spec
				_, err = client.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, updated, metav1.UpdateOptions{})
			}
			// Retried: the API may still be starting.
			return err == nil, nil
		})
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", crd.Name, err)
		}
	}
	return nil
}

// waitForRootCRDs returns once every kplane CRD is established.
func waitForRootCRDs(ctx context.Context, loopback *restclient.Config) error {
	client, err := apiextensionsclient.NewForConfig(loopback)
	if err != nil {
		return err
	}
	crds, err := manifests.CRDs()
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, want := range crds {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil || !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
				return false, nil
			}
		}
		return true, nil
	})
}
