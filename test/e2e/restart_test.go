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

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/test/e2e/framework"
)

// TestEveryStoredPlaneServesOnceReady: a restarted server is ready before
// it knows every stored plane, and serves each one anyway: the first
// requests, sent the moment /readyz first answers ok, are served by every
// plane (a request loads its plane's Plane, and its template's); none
// answers 404 because its Plane was not looked at yet. A member plane's
// service account reads what its template holds (authentication,
// authorization and the read all go through the template); a write to
// the template is refused as read-only and a write to the member is taken,
// both of which need every plane known.
func TestEveryStoredPlaneServesOnceReady(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	const planeCount = 1500
	names := createPlainPlanes(t, s, "stored", planeCount)
	memberToken := storeTemplateAndMember(t, s, "stored-template", "stored-member")
	s.Kill()

	type firstRequests struct {
		codes    map[string]int
		layering []string
	}
	answers := make(chan *firstRequests, 1)
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
		layering := checkLayersAtReady(ctx, s, "stored-template", "stored-member", memberToken)
		answers <- &firstRequests{codes: firstAnswers(ctx, s, names), layering: layering}
	}()
	s.Restart(t)

	got := <-answers
	if got == nil {
		t.Fatal("/readyz never answered ok")
	}
	for _, problem := range got.layering {
		t.Error(problem)
	}
	var wrong []string
	for _, name := range names {
		if got.codes[name] != http.StatusOK {
			wrong = append(wrong, fmt.Sprintf("%s: %d", name, got.codes[name]))
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		t.Fatalf("%d of %d stored planes did not serve their first request after /readyz ok, e.g. %v",
			len(wrong), len(names), wrong[:min(len(wrong), 5)])
	}
	// The log says when the restarted server became ready, and when it
	// knew every stored plane (the first start said so with none).
	known := fmt.Sprintf(`msg="Every stored plane is known" planes=%d`, planeCount+2)
	framework.Eventually(t, 30*time.Second, "the log says "+known, func(context.Context) error {
		log := s.Log()
		if strings.Count(log, "msg=Ready") < 2 || !strings.Contains(log, known) {
			return fmt.Errorf("not in the log yet")
		}
		return nil
	})
}

// storeTemplateAndMember makes plane template hold a ConfigMap "seed" and
// a service account "reader" that may view the default namespace, then
// plane member from it, and returns a token of reader in member.
func storeTemplateAndMember(t *testing.T, s *framework.Server, template, member string) string {
	t.Helper()
	ctx := t.Context()
	createPlane(t, s, template, "")
	c := s.Client(t, template)
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "seed"}, Data: map[string]string{"from": template}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader-views"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "reader", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPlane(t, s, member, template)
	tr, err := s.Client(t, member).CoreV1().ServiceAccounts("default").CreateToken(ctx, "reader",
		&authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// checkLayersAtReady sends, right after /readyz turns ok, a write to the
// template (first: nothing has made the member known yet), a read of the
// template's ConfigMap through member with reader's token and a write to
// the member, and returns what was not as it must be.
func checkLayersAtReady(ctx context.Context, s *framework.Server, template, member, token string) []string {
	var problems []string
	cfg := s.RESTConfig(member)
	cfg.BearerToken = token
	reader, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return []string{err.Error()}
	}
	admin := func(plane string) *kubernetes.Clientset {
		c, _ := kubernetes.NewForConfig(s.RESTConfig(plane))
		return c
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "after-restart-"}}
	if _, err := admin(template).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		problems = append(problems, fmt.Sprintf("a write to a template with members at ready: want 403, got %v", err))
	}
	seed, err := reader.CoreV1().ConfigMaps("default").Get(ctx, "seed", metav1.GetOptions{})
	if err != nil || seed.Data["from"] != template {
		problems = append(problems, fmt.Sprintf("the member's service account reading the template's ConfigMap at ready: %v %v", err, seed))
	}
	if _, err := admin(member).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		problems = append(problems, fmt.Sprintf("a write to a member at ready: %v", err))
	}
	return problems
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
