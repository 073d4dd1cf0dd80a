package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	svmv1 "k8s.io/api/storagemigration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	flowcontrolbootstrap "k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/test/e2e/framework"
)

// addedGroups are the groups (and their resources) a plane serves like
// kube-apiserver does, without an aggregator or an APF controller behind
// them.
var addedGroups = map[string][]string{
	"apiregistration.k8s.io/v1":       {"apiservices", "apiservices/status"},
	"flowcontrol.apiserver.k8s.io/v1": {"flowschemas", "flowschemas/status", "prioritylevelconfigurations", "prioritylevelconfigurations/status"},
	"storagemigration.k8s.io/v1":      {"storageversionmigrations", "storageversionmigrations/status"},
}

// TestAPIGroupsDiscovery: a plane lists apiregistration, flowcontrol and
// storagemigration in aggregated and legacy discovery, in OpenAPI v2 and
// v3, and kubectl api-resources shows them.
func TestAPIGroupsDiscovery(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "groups-discovery")
	c := shared.Client(t, plane)

	// client-go asks for aggregated discovery first.
	_, lists, err := c.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatalf("aggregated discovery: %v", err)
	}
	byGV := map[string][]string{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			byGV[l.GroupVersion] = append(byGV[l.GroupVersion], r.Name)
		}
	}
	for gv, want := range addedGroups {
		for _, r := range want {
			if !slices.Contains(byGV[gv], r) {
				t.Errorf("aggregated discovery of %s: no %s (has %v)", gv, r, byGV[gv])
			}
		}
	}

	// Legacy (unaggregated) discovery, as older clients read it.
	var groups metav1.APIGroupList
	getJSON(t, plane, "/apis", &groups)
	for gv := range addedGroups {
		group, version, _ := strings.Cut(gv, "/")
		i := slices.IndexFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == group })
		if i < 0 || groups.Groups[i].PreferredVersion.Version != version {
			t.Errorf("/apis: group %s with preferred version %s missing", group, version)
		}
		var apiGroup metav1.APIGroup
		getJSON(t, plane, "/apis/"+group, &apiGroup)
		if apiGroup.PreferredVersion.GroupVersion != gv {
			t.Errorf("/apis/%s: preferred version %q, want %s", group, apiGroup.PreferredVersion.GroupVersion, gv)
		}
		var resources metav1.APIResourceList
		getJSON(t, plane, "/apis/"+gv, &resources)
		for _, r := range addedGroups[gv] {
			if !slices.ContainsFunc(resources.APIResources, func(a metav1.APIResource) bool { return a.Name == r }) {
				t.Errorf("/apis/%s: no %s", gv, r)
			}
		}
	}

	var v3 struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	getJSON(t, plane, "/openapi/v3", &v3)
	for gv := range addedGroups {
		if _, ok := v3.Paths["apis/"+gv]; !ok {
			t.Errorf("/openapi/v3 does not list apis/%s", gv)
		}
	}
	// Every listed document builds: the server keeps only the OpenAPI
	// definitions its routes carry, and a type missing from them fails
	// its group's document.
	for gv := range v3.Paths {
		var document struct {
			Components struct {
				Schemas map[string]json.RawMessage `json:"schemas"`
			} `json:"components"`
		}
		getJSON(t, plane, "/openapi/v3/"+gv, &document)
		if len(document.Components.Schemas) == 0 {
			t.Errorf("/openapi/v3/%s has no schemas", gv)
		}
	}
	var v2 struct {
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	getJSON(t, plane, "/openapi/v2", &v2)
	for _, def := range []string{
		"io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService",
		"io.k8s.api.flowcontrol.v1.FlowSchema",
		"io.k8s.api.flowcontrol.v1.PriorityLevelConfiguration",
		"io.k8s.api.storagemigration.v1.StorageVersionMigration",
	} {
		if _, ok := v2.Definitions[def]; !ok {
			t.Errorf("/openapi/v2 has no definition %s", def)
		}
	}

	out := shared.MustKubectl(t, plane, "", "api-resources", "-o", "wide")
	for _, want := range []string{"apiservices", "flowschemas", "prioritylevelconfigurations", "storageversionmigrations"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl api-resources lists no %s:\n%s", want, out)
		}
	}
}

// getJSON GETs path in plane and decodes the JSON answer into out.
func getJSON(t *testing.T, plane, path string, out any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, shared.PlaneURL(plane)+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+shared.AdminToken())
	req.Header.Set("Accept", "application/json")
	resp, err := shared.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// TestAPIServicesInPlane: APIServices are stored per plane; a local one
// is Available, one that names a Service is not (nothing is proxied), and a
// client cannot make it so. Plane B sees none of plane A's.
func TestAPIServicesInPlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	planeA, planeB := uniquePlane(t, "apiservices-a"), uniquePlane(t, "apiservices-b")
	a := aggregatorClient(t, planeA).ApiregistrationV1().APIServices()

	local, err := a.Create(ctx, &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1alpha1.local.example.com"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "local.example.com", Version: "v1alpha1",
			GroupPriorityMinimum: 100, VersionPriority: 10},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create local APIService: %v", err)
	}
	expectAvailable(t, local, apiregistrationv1.ConditionTrue, "Local")

	remote, err := a.Create(ctx, &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.remote.example.com"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "remote.example.com", Version: "v1beta1",
			Service:               &apiregistrationv1.ServiceReference{Namespace: "default", Name: "remote", Port: ptr.To[int32](443)},
			InsecureSkipTLSVerify: true, GroupPriorityMinimum: 100, VersionPriority: 10},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create remote APIService: %v", err)
	}
	expectAvailable(t, remote, apiregistrationv1.ConditionFalse, "NotProxied")

	// The server owns Available: a status write cannot claim the remote
	// one is served.
	remote.Status.Conditions = []apiregistrationv1.APIServiceCondition{{Type: apiregistrationv1.Available,
		Status: apiregistrationv1.ConditionTrue, Reason: "Claimed", LastTransitionTime: metav1.Now()}}
	remote, err = a.UpdateStatus(ctx, remote, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	expectAvailable(t, remote, apiregistrationv1.ConditionFalse, "NotProxied")

	// Spec updates, patches and server-side apply work as upstream.
	local.Spec.VersionPriority = 20
	if local, err = a.Update(ctx, local, metav1.UpdateOptions{}); err != nil || local.Spec.VersionPriority != 20 {
		t.Fatalf("update: %v", err)
	}
	if _, err := a.Patch(ctx, local.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("merge patch: %v", err)
	}
	out := shared.MustKubectl(t, planeA, `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.applied.example.com}
spec: {group: applied.example.com, version: v1, groupPriorityMinimum: 100, versionPriority: 15}
`, "apply", "--server-side", "-f", "-")
	if !strings.Contains(out, "serverside-applied") {
		t.Fatalf("server-side apply: %s", out)
	}
	table := shared.MustKubectl(t, planeA, "", "get", "apiservices")
	if !strings.Contains(table, "False (NotProxied)") || !strings.Contains(table, "v1.applied.example.com") {
		t.Fatalf("kubectl get apiservices:\n%s", table)
	}

	expectNotInPlane(t, planeB, []string{local.Name, remote.Name, "v1.applied.example.com"}, func(name string) error {
		_, err := aggregatorClient(t, planeB).ApiregistrationV1().APIServices().Get(ctx, name, metav1.GetOptions{})
		return err
	}, func() ([]string, error) {
		list, err := aggregatorClient(t, planeB).ApiregistrationV1().APIServices().List(ctx, metav1.ListOptions{})
		return names(list, err)
	})

	for _, name := range []string{local.Name, remote.Name, "v1.applied.example.com"} {
		if err := a.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	if list, err := a.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("after deleting every APIService: %v, %v", list, err)
	}
}

func aggregatorClient(t *testing.T, plane string) *aggregator.Clientset {
	t.Helper()
	c, err := aggregator.NewForConfig(shared.RESTConfig(plane))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func expectAvailable(t *testing.T, svc *apiregistrationv1.APIService, status apiregistrationv1.ConditionStatus, reason string) {
	t.Helper()
	for _, c := range svc.Status.Conditions {
		if c.Type == apiregistrationv1.Available {
			if c.Status != status || c.Reason != reason || c.Message == "" {
				t.Fatalf("%s: Available=%s (%s: %s), want %s (%s)", svc.Name, c.Status, c.Reason, c.Message, status, reason)
			}
			return
		}
	}
	t.Fatalf("%s has no Available condition: %+v", svc.Name, svc.Status)
}

// expectNotInPlane checks that plane neither gets nor lists any of names.
func expectNotInPlane(t *testing.T, plane string, objects []string, get func(string) error, list func() ([]string, error)) {
	t.Helper()
	for _, name := range objects {
		if err := get(name); !apierrors.IsNotFound(err) {
			t.Errorf("plane %s: get %s = %v, want NotFound", plane, name, err)
		}
	}
	listed, err := list()
	if err != nil {
		t.Fatalf("plane %s: list: %v", plane, err)
	}
	for _, name := range objects {
		if slices.Contains(listed, name) {
			t.Errorf("plane %s lists %s of another plane", plane, name)
		}
	}
}

// names returns the names in a list answer.
func names(list runtime.Object, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, item := range items {
		accessor, err := meta.Accessor(item)
		if err != nil {
			return nil, err
		}
		out = append(out, accessor.GetName())
	}
	return out, nil
}

// TestFlowControlInPlane: FlowSchemas and PriorityLevelConfigurations are
// a plane's own objects, with the upstream API (status included).
func TestFlowControlInPlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	planeA, planeB := uniquePlane(t, "flowcontrol-a"), uniquePlane(t, "flowcontrol-b")
	fc := shared.Client(t, planeA).FlowcontrolV1()

	level, err := fc.PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-level"},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{NominalConcurrencyShares: ptr.To[int32](7),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PriorityLevelConfiguration: %v", err)
	}
	schema, err := fc.FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-schema"},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level.Name},
			MatchingPrecedence:         500,
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup,
					Group: &flowcontrolv1.GroupSubject{Name: "system:authenticated"}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""},
					Resources: []string{"configmaps"}, Namespaces: []string{"*"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create FlowSchema: %v", err)
	}

	schema.Spec.MatchingPrecedence = 600
	if schema, err = fc.FlowSchemas().Update(ctx, schema, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update FlowSchema: %v", err)
	}
	schema.Status.Conditions = []flowcontrolv1.FlowSchemaCondition{{Type: "Tested", Status: flowcontrolv1.ConditionTrue,
		Reason: "E2E", LastTransitionTime: metav1.Now()}}
	if schema, err = fc.FlowSchemas().UpdateStatus(ctx, schema, metav1.UpdateOptions{}); err != nil || len(schema.Status.Conditions) != 1 {
		t.Fatalf("update FlowSchema status: %v", err)
	}
	if _, err := fc.PriorityLevelConfigurations().Patch(ctx, level.Name, types.MergePatchType,
		[]byte(`{"spec":{"limited":{"nominalConcurrencyShares":9}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch PriorityLevelConfiguration: %v", err)
	}
	got, err := fc.PriorityLevelConfigurations().Get(ctx, level.Name, metav1.GetOptions{})
	if err != nil || *got.Spec.Limited.NominalConcurrencyShares != 9 {
		t.Fatalf("get PriorityLevelConfiguration after patch: %v %+v", err, got)
	}

	other := shared.Client(t, planeB).FlowcontrolV1()
	expectNotInPlane(t, planeB, []string{schema.Name}, func(name string) error {
		_, err := other.FlowSchemas().Get(ctx, name, metav1.GetOptions{})
		return err
	}, func() ([]string, error) { return names(other.FlowSchemas().List(ctx, metav1.ListOptions{})) })
	expectNotInPlane(t, planeB, []string{level.Name}, func(name string) error {
		_, err := other.PriorityLevelConfigurations().Get(ctx, name, metav1.GetOptions{})
		return err
	}, func() ([]string, error) {
		return names(other.PriorityLevelConfigurations().List(ctx, metav1.ListOptions{}))
	})

	if err := fc.FlowSchemas().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete FlowSchemas: %v", err)
	}
	if err := fc.PriorityLevelConfigurations().Delete(ctx, level.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete PriorityLevelConfiguration: %v", err)
	}
	if left, err := names(fc.FlowSchemas().List(ctx, metav1.ListOptions{})); err != nil || len(left) != 0 {
		t.Fatalf("FlowSchemas left after delete: %v %v", left, err)
	}
}

// TestStorageVersionMigrationsInPlane: StorageVersionMigrations are stored
// per plane with the upstream API; nothing migrates anything.
func TestStorageVersionMigrationsInPlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	planeA, planeB := uniquePlane(t, "svm-a"), uniquePlane(t, "svm-b")
	svms := shared.Client(t, planeA).StoragemigrationV1().StorageVersionMigrations()

	svm, err := svms.Create(ctx, &svmv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec:       svmv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Resource: "configmaps"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create StorageVersionMigration: %v", err)
	}
	svm.Labels = map[string]string{"updated": "yes"}
	if svm, err = svms.Update(ctx, svm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	svm.Status.Conditions = []metav1.Condition{{Type: "TestCondition", Status: metav1.ConditionTrue, Reason: "TestReason",
		Message: "set by the test", LastTransitionTime: metav1.Now()}}
	if svm, err = svms.UpdateStatus(ctx, svm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}
	// The spec is immutable, as upstream.
	svm.Spec.Resource.Resource = "secrets"
	if _, err := svms.Update(ctx, svm, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("changing the spec: %v, want Invalid", err)
	}
	if _, err := svms.Patch(ctx, svm.Name, types.JSONPatchType,
		[]byte(`[{"op":"add","path":"/metadata/labels/patched","value":"yes"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("json patch: %v", err)
	}

	other := shared.Client(t, planeB).StoragemigrationV1().StorageVersionMigrations()
	expectNotInPlane(t, planeB, []string{svm.Name}, func(name string) error {
		_, err := other.Get(ctx, name, metav1.GetOptions{})
		return err
	}, func() ([]string, error) { return names(other.List(ctx, metav1.ListOptions{})) })

	if err := svms.Delete(ctx, svm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	eventually(t, 10*time.Second, "StorageVersionMigration deleted", func() (bool, error) {
		_, err := svms.Get(ctx, svm.Name, metav1.GetOptions{})
		return gone(err)
	})
}

// TestFlowControlBootstrap: with --plane-bootstrap full a plane starts with
// the FlowSchemas and PriorityLevelConfigurations an upstream cluster has;
// a minimal plane (the shared server's) starts with none.
func TestFlowControlBootstrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	minimal, err := names(shared.Client(t, uniquePlane(t, "apf-minimal")).FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{}))
	if err != nil || len(minimal) != 0 {
		t.Fatalf("minimal plane FlowSchemas: %v %v", minimal, err)
	}

	s := framework.StartServer(t, framework.Options{Args: []string{"--plane-bootstrap", "full"}})
	for _, plane := range []string{"root", "apf-full"} {
		c := s.Client(t, plane)
		schemas, err := names(c.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		levels, err := names(c.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		expectAll(t, plane, "FlowSchema", schemas, upstreamNames(flowcontrolbootstrap.MandatoryFlowSchemas, flowcontrolbootstrap.SuggestedFlowSchemas))
		expectAll(t, plane, "PriorityLevelConfiguration", levels,
			upstreamNames(flowcontrolbootstrap.MandatoryPriorityLevelConfigurations, flowcontrolbootstrap.SuggestedPriorityLevelConfigurations))
	}
	out := s.MustKubectl(t, "apf-full", "", "get", "flowschemas")
	if !strings.Contains(out, "catch-all") || !strings.Contains(out, "exempt") {
		t.Fatalf("kubectl get flowschemas:\n%s", out)
	}
}

func upstreamNames[T metav1.Object](lists ...[]T) []string {
	var out []string
	for _, l := range lists {
		for _, o := range l {
			out = append(out, o.GetName())
		}
	}
	return out
}

func expectAll(t *testing.T, plane, kind string, got, want []string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("no upstream %ss to compare with", kind)
	}
	for _, name := range want {
		if !slices.Contains(got, name) {
			t.Errorf("plane %s: no %s %s (has %v)", plane, kind, name, got)
		}
	}
}

// TestAddedGroupsDeletedWithPlane: APIServices, FlowSchemas,
// PriorityLevelConfigurations and StorageVersionMigrations are stored under
// the plane's keys and go with it.
func TestAddedGroupsDeletedWithPlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plane := uniquePlane(t, "groups-wipe")
	c := shared.Client(t, plane)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(aggregatorClient(t, plane).ApiregistrationV1().APIServices().Create(ctx, &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1.wiped.example.com"},
		Spec:       apiregistrationv1.APIServiceSpec{Group: "wiped.example.com", Version: "v1", GroupPriorityMinimum: 1, VersionPriority: 1},
	}, metav1.CreateOptions{}))
	must(c.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "wiped-level"},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}}},
	}, metav1.CreateOptions{}))
	must(c.FlowcontrolV1().FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "wiped-schema"},
		Spec: flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "wiped-level"},
			MatchingPrecedence: 100},
	}, metav1.CreateOptions{}))
	must(c.StoragemigrationV1().StorageVersionMigrations().Create(ctx, &svmv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "wiped-migration"},
		Spec:       svmv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Resource: "configmaps"}},
	}, metav1.CreateOptions{}))

	keys := planeKeys(t, shared, plane)
	for _, want := range []string{"/registry/apiregistration.k8s.io/apiservices/" + plane + "/v1.wiped.example.com",
		"/" + plane + "/wiped-level", "/" + plane + "/wiped-schema", "/" + plane + "/wiped-migration"} {
		if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, want) }) {
			t.Errorf("no key ending in %s among the plane's keys", want)
		}
	}
	// The plane's snapshot holds them, encoded as the API serves them.
	want := map[string]string{
		"apiregistration.k8s.io/apiservices":                       "/v1.wiped.example.com",
		"flowcontrol.apiserver.k8s.io/prioritylevelconfigurations": "/wiped-level",
		"flowcontrol.apiserver.k8s.io/flowschemas":                 "/wiped-schema",
		"storagemigration.k8s.io/storageversionmigrations":         "/wiped-migration",
	}
	eventually(t, 10*time.Second, "the snapshot holds the objects", func() (bool, error) {
		items := mustSnapshot(t, plane, "").items()
		for resource, name := range want {
			obj, ok := items[resource][name]
			if !ok {
				return false, fmt.Errorf("no %s %s in the snapshot", resource, name)
			}
			if api, _ := obj["apiVersion"].(string); !strings.HasSuffix(api, "/v1") {
				return false, fmt.Errorf("%s %s has apiVersion %q", resource, name, api)
			}
		}
		return true, nil
	})

	if out, err := kplaneCmd(t, shared, "planes", "delete", plane); err != nil {
		t.Fatalf("kplane planes delete: %v\n%s", err, out)
	}
	if keys := planeKeys(t, shared, plane); len(keys) != 0 {
		t.Fatalf("%d keys of the deleted plane remain: %v", len(keys), keys)
	}
}
