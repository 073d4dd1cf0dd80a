package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/test/e2e/framework"
)

// TestEveryStoredPlaneServesOnceReady: a restarted server answers /readyz
// ok only once it knows every stored plane. The first requests, sent the
// moment /readyz first answers ok, are served by every plane; none answers
// 404 because its Plane was listed but not yet looked at.
func TestEveryStoredPlaneServesOnceReady(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	const planeCount = 1500
	names := createPlainPlanes(t, s, "stored", planeCount)
	s.Kill()

	answers := make(chan map[string]int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		// Polled as tightly as a client could: what is checked is the
		// moment /readyz turns ok, not a moment later.
		client := s.HTTPClient()
		err := wait.PollUntilContextCancel(ctx, 2*time.Millisecond, true, func(context.Context) (bool, error) {
			resp, err := client.Get(s.URL + "/readyz")
			if err != nil {
				return false, nil
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
		if err != nil {
			answers <- nil
			return
		}
		answers <- firstAnswers(ctx, s, names)
	}()
	s.Restart(t)

	got := <-answers
	if got == nil {
		t.Fatal("/readyz never answered ok")
	}
	var wrong []string
	for _, name := range names {
		if got[name] != http.StatusOK {
			wrong = append(wrong, fmt.Sprintf("%s: %d", name, got[name]))
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		t.Fatalf("%d of %d stored planes did not serve their first request after /readyz ok, e.g. %v",
			len(wrong), len(names), wrong[:min(len(wrong), 5)])
	}
	// The log says when the restarted server became ready, and with how
	// many planes (the first start said so with none).
	ready := fmt.Sprintf("msg=Ready planes=%d", planeCount)
	framework.Eventually(t, 30*time.Second, "the log says "+ready, func(context.Context) error {
		if !strings.Contains(s.Log(), ready) {
			return fmt.Errorf("not in the log yet")
		}
		return nil
	})
}

// createPlainPlanes creates count planes named <prefix>-<i> from 8
// clients at once, without waiting for each to serve.
func createPlainPlanes(t *testing.T, s *framework.Server, prefix string, count int) []string {
	t.Helper()
	planesAPI := s.Dynamic(t, "root").Resource(planesGVR)
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	work := make(chan string)
	errs := make(chan error, count)
	var creators sync.WaitGroup
	for range 8 {
		creators.Go(func() {
			for name := range work {
				if _, err := planesAPI.Create(context.Background(), newPlane(name, nil), metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("creating plane %s: %w", name, err)
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	creators.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return names
}

// firstAnswers GETs the default namespace of every plane in names, 16 at
// once, never provisioning one, and returns each plane's status code (0:
// no answer).
func firstAnswers(ctx context.Context, s *framework.Server, names []string) map[string]int {
	client := s.HTTPClient()
	var mu sync.Mutex
	codes := make(map[string]int, len(names))
	work := make(chan string)
	var getters sync.WaitGroup
	for range 16 {
		getters.Go(func() {
			for name := range work {
				code := 0
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.PlaneURL(name)+"/api/v1/namespaces/default", nil)
				if err == nil {
					req.Header.Set("Authorization", "Bearer "+s.AdminToken())
					// An admin's request would provision a plane the
					// server does not know yet; what is checked is that
					// it knows every stored one.
					req.Header.Set(lifecycle.NoProvisionHeader, "true")
					if resp, err := client.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						code = resp.StatusCode
					}
				}
				mu.Lock()
				codes[name] = code
				mu.Unlock()
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	getters.Wait()
	return codes
}

// TestRestartAppliesANewPlaneCRD: a server started on a datastore whose
// Plane CRD another release wrote (here: a description changed) puts its
// own back and becomes ready with its stored planes; a plane made then
// serves. The start used to list the Planes from the storage of the CRD
// it replaced and never became ready.
func TestRestartAppliesANewPlaneCRD(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	// Enough Planes that their watch cache fills after the CRD's update.
	createPlainPlanes(t, s, "kept", 3000)
	crds := s.Dynamic(t, "root").Resource(crdGVR)
	patch := []byte(`[{"op":"replace","path":"/spec/versions/0/schema/openAPIV3Schema/description","value":"an older release's"}]`)
	if _, err := crds.Patch(t.Context(), "planes.kplane.dev", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	s.Restart(t)

	crd, err := crds.Get(t.Context(), "planes.kplane.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d, _, _ := unstructured.NestedString(crd.Object, "spec", "versions", "0", "schema", "openAPIV3Schema", "description"); d == "an older release's" {
		t.Fatal("the restarted server kept the stored Plane CRD")
	}
	createPlane(t, s, "after-new-crd", "")
	if _, err := s.Client(t, "kept-2999").CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("a stored plane after the restart: %v", err)
	}
}
