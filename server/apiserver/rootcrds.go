package apiserver

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	restclient "k8s.io/client-go/rest"

	"kplane.dev/kplane/manifests"
	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/crds"
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
			case err == nil && unchanged(existing, crd):
				// A restart's common case: the update would be a no-op
				// write, its validation and a round trip on the way to
				// /readyz.
				return true, nil
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

// unchanged reports whether the stored CRD's spec is the manifest's, once
// the API's defaults are applied to the manifest.
func unchanged(stored, manifest *apiextensionsv1.CustomResourceDefinition) bool {
	want := manifest.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(want)
	return equality.Semantic.DeepEqual(stored.Spec, want.Spec)
}

// waitForRootCRDs returns once this server serves every kplane CRD in the
// root plane: the index this server serves custom resources from holds
// them established. The condition in the datastore reaches that index a
// moment later; the index is what a request meets, and reading it costs
// no request.
func waitForRootCRDs(ctx context.Context, customResources *crds.Server) error {
	want, err := manifests.CRDs()
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		for _, crd := range want {
			gr := schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}
			if _, served := customResources.ForResource(planes.Root, gr); !served {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting until the root plane serves kplane's CRDs: %w", err)
	}
	return nil
}
