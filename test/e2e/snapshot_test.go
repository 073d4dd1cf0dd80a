package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"os/exec"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"kplane.dev/kplane/test/e2e/framework"
)

// snapshotManifest holds objects of 15 kinds (with a CRD and one of its
// custom resources) in namespace "shop".
const snapshotManifest = `
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop, labels: {tier: web}}
data: {color: blue}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: shop}
stringData: {password: hunter2}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: robot, namespace: shop}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: shop, labels: {app: web, tier: web}}
spec:
  containers: [{name: c, image: nginx}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, labels: {tier: web}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: postgres}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: shop}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: shop}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: shop}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: shop}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects: [{kind: ServiceAccount, name: robot, namespace: shop}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: shop}
spec: {podSelector: {}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: shop}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`

const widgetManifest = `
apiVersion: example.com/v1
kind: Widget
metadata: {name: gear, namespace: shop, labels: {tier: web}}
spec: {teeth: 12}
`

// snapshotResponse is the wire format, decoded the way a client would.
type snapshotResponse struct {
	Cluster         string `json:"cluster"`
	SnapshotTime    string `json:"snapshotTime"`
	ResourceVersion string `json:"resourceVersion"`
	LiveResources   int    `json:"liveResources"`
	Resources       []struct {
		Group           string           `json:"group"`
		Version         string           `json:"version"`
		Resource        string           `json:"resource"`
		Kind            string           `json:"kind"`
		Namespaced      bool             `json:"namespaced"`
		Synced          bool             `json:"synced"`
		ItemCount       int              `json:"itemCount"`
		ResourceVersion string           `json:"resourceVersion"`
		Items           []map[string]any `json:"items"`
	} `json:"resources"`
}

// items returns the snapshot's objects by "group/resource" and then
// "namespace/name".
func (s *snapshotResponse) items() map[string]map[string]map[string]any {
	out := map[string]map[string]map[string]any{}
	for _, r := range s.Resources {
		byName := map[string]map[string]any{}
		for _, item := range r.Items {
			byName[objectName(item)] = item
		}
		out[r.Group+"/"+r.Resource] = byName
	}
	return out
}

func objectName(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	return ns + "/" + name
}

// getSnapshot sends GET /snapshot?query to plane as the admin, or as the
// user named by impersonate, and returns the status code and body.
func getSnapshot(t *testing.T, plane, query string, impersonate ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, shared.PlaneURL(plane)+"/snapshot?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+shared.AdminToken())
	if len(impersonate) > 0 {
		req.Header.Set("Impersonate-User", impersonate[0])
	}
	resp, err := shared.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func mustSnapshot(t *testing.T, plane, query string, impersonate ...string) *snapshotResponse {
	t.Helper()
	code, body := getSnapshot(t, plane, query, impersonate...)
	if code != http.StatusOK {
		t.Fatalf("snapshot of %s?%s: %d %s", plane, query, code, body)
	}
	var s snapshotResponse
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("decoding snapshot: %v", err)
	}
	return &s
}

// wantStatus checks an error answer is a metav1.Status with code and a
// message containing every one of parts.
func wantStatus(t *testing.T, code int, body []byte, wantCode int, parts ...string) {
	t.Helper()
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil || status.Kind != "Status" {
		t.Fatalf("want a Status, got %d %s", code, body)
	}
	if code != wantCode || int(status.Code) != wantCode {
		t.Fatalf("want %d, got %d %s", wantCode, code, body)
	}
	for _, p := range parts {
		if !strings.Contains(status.Message, p) {
			t.Fatalf("message %q lacks %q", status.Message, p)
		}
	}
}

// setupShop fills plane with snapshotManifest and a Widget.
func setupShop(t *testing.T, plane string) {
	t.Helper()
	// The shop's Deployment and Pod are compared as written: no workload
	// simulation acts on them.
	apiOnlyPlane(t, shared, plane)
	shared.MustKubectl(t, plane, snapshotManifest, "apply", "-f", "-")
	waitEstablished(t, shared, plane, "widgets.example.com")
	shared.MustKubectl(t, plane, widgetManifest, "apply", "-f", "-")
	// The namespace's controller-made objects are part of what is compared.
	framework.Eventually(t, framework.DefaultTimeout, "root CA and default service account in namespace shop of "+plane, func(context.Context) error {
		out, err := shared.Kubectl(t, plane, "", "get", "configmap/kube-root-ca.crt", "serviceaccount/default", "-n", "shop", "-o", "name")
		if err != nil || strings.Count(out, "/") != 2 {
			return fmt.Errorf("%v %s", err, out)
		}
		return nil
	})
}

// withoutServerFields drops what a snapshot leaves out by design from an
// object read through the API: managed fields and the plane annotation.
func withoutServerFields(obj map[string]any) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	delete(md, "managedFields")
	if a, ok := md["annotations"].(map[string]any); ok {
		delete(a, "kplane.dev/plane")
		if len(a) == 0 {
			delete(md, "annotations")
		}
	}
	return obj
}

// TestSnapshotMatchesKubectl: every resource of a plane with 15 kinds (one
// a custom resource) has the items `kubectl get -A -o json` returns, in the
// same version and with the same content, without the server's own fields.
func TestSnapshotMatchesKubectl(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "snap-match")
	setupShop(t, plane)

	// The caches follow the datastore: retry until they have every write.
	framework.Eventually(t, framework.DefaultTimeout, "snapshot matches kubectl", func(context.Context) error {
		return compareWithKubectl(t, plane)
	})
}

func compareWithKubectl(t *testing.T, plane string) error {
	snap := mustSnapshot(t, plane, "warm=true")
	if snap.Cluster != plane {
		return fmt.Errorf("cluster %q, want %q", snap.Cluster, plane)
	}
	if _, err := time.Parse(time.RFC3339, snap.SnapshotTime); err != nil {
		return fmt.Errorf("snapshotTime: %v", err)
	}
	if _, err := strconv.ParseUint(snap.ResourceVersion, 10, 64); err != nil {
		return fmt.Errorf("resourceVersion %q: %v", snap.ResourceVersion, err)
	}
	if snap.LiveResources < 40 {
		return fmt.Errorf("liveResources %d: want every served resource", snap.LiveResources)
	}
	var names []string
	kinds := map[string]bool{}
	for _, r := range snap.Resources {
		if !r.Synced {
			return fmt.Errorf("%s not synced after warm=true", r.Resource)
		}
		if r.ItemCount == 0 || r.ItemCount != len(r.Items) {
			return fmt.Errorf("%s: itemCount %d, %d items (empty resources are left out by default)", r.Resource, r.ItemCount, len(r.Items))
		}
		name := r.Resource + "." + r.Version + "." + r.Group
		if r.Group == "" {
			name = r.Resource + "." + r.Version + "."
		}
		names = append(names, name)
		kinds[r.Kind] = true
	}
	for _, k := range []string{"Namespace", "CustomResourceDefinition", "ConfigMap", "Secret", "ServiceAccount", "Service",
		"Pod", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Role", "RoleBinding", "NetworkPolicy",
		"PodDisruptionBudget", "PersistentVolumeClaim", "Widget"} {
		if !kinds[k] {
			return fmt.Errorf("no %s in the snapshot", k)
		}
	}
	out := shared.MustKubectl(t, plane, "", "get", strings.Join(names, ","), "-A", "-o", "json")
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return fmt.Errorf("kubectl output: %v", err)
	}
	fromKubectl := map[string]map[string]map[string]any{}
	for _, item := range list.Items {
		gv, _ := schema.ParseGroupVersion(item["apiVersion"].(string))
		kind := item["kind"].(string)
		var key string
		for _, r := range snap.Resources {
			if r.Group == gv.Group && r.Kind == kind {
				if gv.Version != r.Version {
					return fmt.Errorf("kubectl read %s at %s, snapshot at %s", kind, gv.Version, r.Version)
				}
				key = r.Group + "/" + r.Resource
			}
		}
		if fromKubectl[key] == nil {
			fromKubectl[key] = map[string]map[string]any{}
		}
		fromKubectl[key][objectName(item)] = withoutServerFields(item)
	}
	fromSnapshot := snap.items()
	for key, items := range fromSnapshot {
		for name, item := range items {
			md := item["metadata"].(map[string]any)
			if _, ok := md["managedFields"]; ok {
				t.Fatalf("%s %s carries managedFields", key, name)
			}
			if a, ok := md["annotations"].(map[string]any); ok && a["kplane.dev/plane"] != nil {
				t.Fatalf("%s %s carries the plane annotation", key, name)
			}
			if item["apiVersion"] == nil || item["kind"] == nil {
				t.Fatalf("%s %s has no apiVersion or kind", key, name)
			}
		}
		if !reflect.DeepEqual(items, fromKubectl[key]) {
			return fmt.Errorf("%s: snapshot and kubectl differ:\nsnapshot: %v\nkubectl:  %v", key, items, fromKubectl[key])
		}
	}
	if len(fromKubectl) != len(fromSnapshot) {
		return fmt.Errorf("kubectl read %d resources, snapshot has %d", len(fromKubectl), len(fromSnapshot))
	}
	return nil
}

// TestSnapshotFilters: resource= (names in every accepted form, repeated
// and comma-separated), includeEmpty, namespace, labelSelector, and clear
// 400s for what cannot be served.
func TestSnapshotFilters(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "snap-filter")
	setupShop(t, plane)

	resources := func(s *snapshotResponse) []string {
		var out []string
		for _, r := range s.Resources {
			out = append(out, fmt.Sprintf("%s/%s=%d", r.Group, r.Resource, r.ItemCount))
		}
		sort.Strings(out)
		return out
	}
	check := func(query string, want ...string) {
		t.Helper()
		sort.Strings(want)
		framework.Eventually(t, framework.DefaultTimeout, query, func(context.Context) error {
			if got := resources(mustSnapshot(t, plane, query)); !reflect.DeepEqual(got, want) {
				return fmt.Errorf("got %v, want %v", got, want)
			}
			return nil
		})
	}
	configMaps := func(args ...string) string {
		out := shared.MustKubectl(t, plane, "", append([]string{"get", "configmaps", "-o", "name"}, args...)...)
		return fmt.Sprintf("/configmaps=%d", strings.Count(out, "configmap/"))
	}
	check("resource=pods&resource=deployments.apps", "/pods=1", "apps/deployments=1")
	check("resource=apps/deployments,pod,cm&warm=true", "/pods=1", "apps/deployments=1", configMaps("-A"))
	check("resource=wd", "example.com/widgets=1")
	check("resource=widgets.example.com&resource=example.com/widgets", "example.com/widgets=1")
	check("resource=replicasets.apps")
	check("resource=replicasets.apps&includeEmpty=true", "apps/replicasets=0")
	check("resource=pods,configmaps&namespace=shop", "/pods=1", configMaps("-n", "shop"))
	check("resource=pods,configmaps,widgets&labelSelector=tier%3Dweb", "/pods=1", "/configmaps=1", "example.com/widgets=1")
	check("resource=configmaps&namespace=default", configMaps("-n", "default"))

	namespaced := mustSnapshot(t, plane, "namespace=shop")
	for _, r := range namespaced.Resources {
		if !r.Namespaced {
			t.Fatalf("namespace=shop returned cluster-scoped %s", r.Resource)
		}
		for _, item := range r.Items {
			if !strings.HasPrefix(objectName(item), "shop/") {
				t.Fatalf("namespace=shop returned %s %s", r.Resource, objectName(item))
			}
		}
	}

	code, body := getSnapshot(t, plane, "resource=pods,gizmos")
	wantStatus(t, code, body, http.StatusBadRequest, `unknown resource "gizmos"`, "pods", "deployments.apps", "widgets.example.com")
	code, body = getSnapshot(t, plane, "includeEmpty=maybe")
	wantStatus(t, code, body, http.StatusBadRequest, "includeEmpty")
	code, body = getSnapshot(t, plane, "labelSelector=a%3D%3D%3Db")
	wantStatus(t, code, body, http.StatusBadRequest, "labelSelector")
	code, body = getSnapshot(t, plane, "resource=namespaces&namespace=shop")
	wantStatus(t, code, body, http.StatusBadRequest, "cluster-scoped")
	code, body = getSnapshot(t, plane, "resourceVersion=5")
	wantStatus(t, code, body, http.StatusBadRequest, "watch=true")
}

// TestSnapshotPlaneIsolation: a snapshot holds its own plane's objects
// only, even where another plane has objects of the same names.
func TestSnapshotPlaneIsolation(t *testing.T) {
	t.Parallel()
	a, b := uniquePlane(t, "snap-iso"), uniquePlane(t, "snap-iso")
	setupShop(t, a)
	setupShop(t, b)
	shared.MustKubectl(t, b, "", "create", "configmap", "only-in-b", "-n", "shop")

	uids := func(plane string) map[string]bool {
		out := map[string]bool{}
		for _, r := range mustSnapshot(t, plane, "warm=true").Resources {
			for _, item := range r.Items {
				out[item["metadata"].(map[string]any)["uid"].(string)] = true
				if objectName(item) == "shop/only-in-b" && plane != b {
					t.Fatalf("plane %s shows %s of plane %s", plane, objectName(item), b)
				}
			}
		}
		return out
	}
	// What every new plane starts with is the server's base plane's, one
	// object for all (as a template's objects are its members'): the
	// objects each plane made must be its own.
	fresh := uniquePlane(t, "snap-iso-fresh")
	shared.MustKubectl(t, fresh, "", "get", "namespaces")
	inherited := uids(fresh)
	ua, ub := uids(a), uids(b)
	for uid := range inherited {
		delete(ua, uid)
		delete(ub, uid)
	}
	for uid := range ua {
		if ub[uid] {
			t.Fatalf("object %s is in the snapshots of %s and %s", uid, a, b)
		}
	}
	if len(ua) < 15 || len(ub) < 15 {
		t.Fatalf("snapshots too small: %d, %d objects", len(ua), len(ub))
	}
}

// TestSnapshotAuthorization: a user sees the resources they may list in
// the plane, and nothing else; secrets are no exception; asking for one
// they may not list is 403.
func TestSnapshotAuthorization(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "snap-rbac")
	setupShop(t, plane)
	shared.MustKubectl(t, plane, `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: peek, namespace: shop}
rules: [{apiGroups: ["", "example.com"], resources: [configmaps, pods, widgets], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: peek, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: peek}
subjects: [{kind: User, name: alice}]
`, "apply", "-f", "-")

	// RBAC reads from the caches too: the binding counts once they have it.
	framework.Eventually(t, framework.DefaultTimeout, "alice's snapshot of shop", func(context.Context) error {
		code, body := getSnapshot(t, plane, "namespace=shop&includeEmpty=true&warm=true", "alice")
		if code != http.StatusOK {
			return fmt.Errorf("%d %.300s", code, body)
		}
		var s snapshotResponse
		if err := json.Unmarshal(body, &s); err != nil {
			return framework.Stop(err)
		}
		var got []string
		for _, r := range s.Resources {
			got = append(got, r.Group+"/"+r.Resource)
		}
		sort.Strings(got)
		if !reflect.DeepEqual(got, []string{"/configmaps", "/pods", "example.com/widgets"}) {
			return fmt.Errorf("resources %v", got)
		}
		return nil
	})

	code, body := getSnapshot(t, plane, "namespace=shop&resource=secrets", "alice")
	wantStatus(t, code, body, http.StatusForbidden, "alice", "secrets")
	// At the cluster scope alice may list nothing at all.
	code, body = getSnapshot(t, plane, "", "alice")
	wantStatus(t, code, body, http.StatusForbidden, "alice")
	// In another plane the binding does not exist.
	other := uniquePlane(t, "snap-rbac")
	shared.MustKubectl(t, other, "", "create", "namespace", "shop")
	code, body = getSnapshot(t, other, "namespace=shop", "alice")
	wantStatus(t, code, body, http.StatusForbidden, "alice")
	// Without credentials there is no snapshot.
	resp, err := shared.HTTPClient().Get(shared.PlaneURL(plane) + "/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Fatalf("anonymous snapshot: %d", resp.StatusCode)
	}
}

// TestSnapshotReadsNoDatastore: snapshots are read from the watch caches;
// the datastore's read counters do not move with them (beyond the
// server's own periodic reads), the watch caches' list counters do.
func TestSnapshotReadsNoDatastore(t *testing.T) {
	// Not parallel: other tests' reads would move the datastore counters.
	plane := uniquePlane(t, "snap-nodb")
	setupShop(t, plane)
	mustSnapshot(t, plane, "warm=true")

	// A plane an earlier test deleted is wiped with one consistent list of
	// the datastore per resource (about 60): wait until none is left, so
	// that the reads counted below are the snapshots' and the server's own.
	framework.Eventually(t, 2*time.Minute, "no plane being deleted", func(ctx context.Context) error {
		list, err := shared.Dynamic(t, "root").Resource(planesGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.GetDeletionTimestamp() != nil {
				return fmt.Errorf("plane %s is being deleted", p.GetName())
			}
		}
		return nil
	})
	const calls = 30
	dbBefore, cacheBefore := storageReads(t)
	resources := 0
	for i := 0; i < calls; i++ {
		resources = len(mustSnapshot(t, plane, "includeEmpty=true").Resources)
	}
	dbAfter, cacheAfter := storageReads(t)
	reads := dbAfter.since(dbBefore)
	t.Logf("%d snapshots of %d resources: %d datastore reads, %d watch cache lists",
		calls, resources, reads.total(), cacheAfter.total()-cacheBefore.total())
	if lists := cacheAfter.total() - cacheBefore.total(); lists < calls*resources {
		t.Fatalf("watch cache lists went up by %d: want at least %d", lists, calls*resources)
	}
	// A snapshot that read the datastore would read it once per resource
	// and snapshot: one series would move by calls.
	for series, n := range reads {
		if n >= calls {
			t.Fatalf("%s moved by %d during %d snapshots; datastore reads:\n%s", series, n, calls, reads)
		}
	}
	// The server's own reads (leases, controllers of other planes) are
	// not the snapshots'; a tenth of a datastore read per resource and
	// snapshot leaves them room and still catches snapshots that read it.
	if reads.total() >= calls*resources/10 {
		t.Fatalf("%d datastore reads during %d snapshots:\n%s", reads.total(), calls, reads)
	}
}

// counters are the values of metric series, by series.
type counters map[string]int

func (c counters) total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// since is what moved from earlier to c.
func (c counters) since(earlier counters) counters {
	moved := counters{}
	for series, v := range c {
		if d := v - earlier[series]; d != 0 {
			moved[series] = d
		}
	}
	return moved
}

func (c counters) String() string {
	lines := make([]string, 0, len(c))
	for series, v := range c {
		lines = append(lines, fmt.Sprintf("  %s %d", series, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// storageReads returns the server's datastore reads (etcd_requests_total
// of every read operation) and lists served by its watch caches, by series.
func storageReads(t *testing.T) (datastore, cache counters) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, shared.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+shared.AdminToken())
	resp, err := shared.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	datastore, cache = counters{}, counters{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		switch {
		case strings.HasPrefix(line, "etcd_requests_total{") &&
			(strings.Contains(line, `operation="get"`) || strings.Contains(line, `operation="list`)):
			datastore[series] = int(v)
		case strings.HasPrefix(line, "apiserver_storage_list_total{") && strings.Contains(line, `storage="watchcache"`):
			cache[series] = int(v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return datastore, cache
}

// streamEvent is one line of a delta stream.
type streamEvent struct {
	Type            string         `json:"type"`
	Group           string         `json:"group"`
	Resource        string         `json:"resource"`
	ResourceVersion string         `json:"resourceVersion"`
	Object          map[string]any `json:"object"`
}

// TestSnapshotDeltaStream: a snapshot with its delta stream applied equals
// a later snapshot, after 200 random writes to three kinds (one a custom
// resource) while another plane is written too; a resourceVersion the
// caches no longer reach is 410 Gone.
func TestSnapshotDeltaStream(t *testing.T) {
	t.Parallel()
	plane, other := uniquePlane(t, "snap-stream"), uniquePlane(t, "snap-stream")
	setupShop(t, plane)
	setupShop(t, other)
	mustSnapshot(t, plane, "warm=true")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	first, events, streamErr := streamFromFreshSnapshot(t, ctx, plane)

	state := first.items()
	writeRandomly(t, shared.Dynamic(t, plane), shared.Dynamic(t, other), 200)

	apply := func(ev streamEvent) {
		switch ev.Type {
		case "ADDED", "MODIFIED", "DELETED":
		case "BOOKMARK":
			return
		default:
			t.Fatalf("stream event %s: %v", ev.Type, ev.Object)
		}
		if strings.HasPrefix(objectName(ev.Object), "shop/other-") {
			t.Fatalf("stream of %s has %s of plane %s", plane, objectName(ev.Object), other)
		}
		key := ev.Group + "/" + ev.Resource
		if state[key] == nil {
			state[key] = map[string]map[string]any{}
		}
		if ev.Type == "DELETED" {
			delete(state[key], objectName(ev.Object))
		} else {
			state[key][objectName(ev.Object)] = ev.Object
		}
	}
	nonEmpty := func(m map[string]map[string]map[string]any) map[string]map[string]map[string]any {
		out := map[string]map[string]map[string]any{}
		for k, v := range m {
			if len(v) > 0 {
				out[k] = v
			}
		}
		return out
	}
	framework.Eventually(t, framework.DefaultTimeout, "the delta stream applied to the first snapshot matches a later snapshot", func(context.Context) error {
		// Apply what has arrived until the stream is quiet for a moment.
		idle := time.After(300 * time.Millisecond)
	drain:
		for {
			select {
			case ev := <-events:
				apply(ev)
			case err := <-streamErr:
				return framework.Stop(fmt.Errorf("stream ended: %w", err))
			case <-idle:
				break drain
			}
		}
		later := mustSnapshot(t, plane, "").items()
		var differ []string
		for k := range later {
			if !reflect.DeepEqual(state[k], later[k]) {
				differ = append(differ, fmt.Sprintf("%s: stream-applied %d objects, snapshot %d", k, len(state[k]), len(later[k])))
			}
		}
		if !reflect.DeepEqual(nonEmpty(state), later) {
			return fmt.Errorf("differences %v", differ)
		}
		return nil
	})

	_, _, code, body := openStream(t, ctx, plane, "1")
	wantStatus(t, code, body, http.StatusGone, "too old", "take a new snapshot")
}

// TestSnapshotDeltaStreamAsACacheStarts: a snapshot taken as a custom
// resource's watch cache has just started resumes from the oldest of its
// caches' revisions, older than what the new cache holds. Its delta stream
// opens at once (the new resource's changes since are replayed from the
// datastore) and carries the resource's later changes.
func TestSnapshotDeltaStreamAsACacheStarts(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "snap-cache-start")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dyn := shared.Dynamic(t, plane)
	for i := range 3 {
		// A group of this plane and round alone: a CRD content no other
		// plane serves gets a storage, and a watch cache, of its own.
		group := fmt.Sprintf("r%d.%s.example.org", i, plane)
		createEstablished(ctx, t, shared, plane, crdInGroup(group, "sprockets", "Sprocket", apiextensionsv1.NamespaceScoped, nil, "v1"))
		gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "sprockets"}
		sprocket := func(name string) {
			t.Helper()
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1", "kind": "Sprocket",
				"metadata": map[string]any{"name": name}}}
			if _, err := dyn.Resource(gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating sprocket %s of %s: %v", name, group, err)
			}
		}
		sprocket("first")
		snap := mustSnapshot(t, plane, "")
		events, errs, code, body := openStream(t, ctx, plane, snap.ResourceVersion)
		if code != http.StatusOK {
			t.Fatalf("round %d: delta stream from the snapshot's revision %s: %d %s", i, snap.ResourceVersion, code, body)
		}
		sprocket("second")
		deadline := time.After(framework.DefaultTimeout)
		for found := false; !found; {
			select {
			case ev := <-events:
				found = ev.Type == "ADDED" && ev.Group == group && objectName(ev.Object) == "default/second"
			case err := <-errs:
				t.Fatalf("round %d: stream ended: %v", i, err)
			case <-deadline:
				t.Fatalf("round %d: no ADDED of default/second of %s on the stream", i, group)
			}
		}
	}
}

// streamFromFreshSnapshot takes a snapshot of plane and opens its delta
// stream from it, with a new snapshot after a 410. A stream from a recent
// snapshot opens at once, also when one of its caches started after the
// snapshot's revision (TestSnapshotDeltaStreamAsACacheStarts).
func streamFromFreshSnapshot(t *testing.T, ctx context.Context, plane string) (*snapshotResponse, <-chan streamEvent, <-chan error) {
	t.Helper()
	var snap *snapshotResponse
	var events <-chan streamEvent
	var errs <-chan error
	framework.Eventually(t, framework.DefaultTimeout, "a delta stream from a fresh snapshot", func(context.Context) error {
		snap = mustSnapshot(t, plane, "")
		var code int
		var body []byte
		events, errs, code, body = openStream(t, ctx, plane, snap.ResourceVersion)
		err := fmt.Errorf("delta stream from %s: %d %s", snap.ResourceVersion, code, body)
		switch code {
		case http.StatusOK:
			return nil
		case http.StatusGone:
			return err
		default:
			return framework.Stop(err)
		}
	})
	return snap, events, errs
}

// openStream opens GET /snapshot?watch=true from rv. On 200 it returns the
// stream's events; otherwise the code and body.
func openStream(t *testing.T, ctx context.Context, plane, rv string) (<-chan streamEvent, <-chan error, int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		shared.PlaneURL(plane)+"/snapshot?watch=true&resourceVersion="+url.QueryEscape(rv), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+shared.AdminToken())
	client := shared.HTTPClient()
	client.Timeout = 0
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return nil, nil, resp.StatusCode, body
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("stream Content-Type %q", ct)
	}
	events := make(chan streamEvent, 1024)
	errs := make(chan error, 1)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var ev streamEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				errs <- fmt.Errorf("line %q: %v", sc.Text(), err)
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
		if ctx.Err() == nil {
			errs <- fmt.Errorf("stream closed: %v", sc.Err())
		}
	}()
	return events, errs, http.StatusOK, nil
}

// writeRandomly makes n random creates, updates and deletes of config
// maps, secrets and widgets in namespace shop of plane, and a quarter as
// many in other (named other-*).
func writeRandomly(t *testing.T, plane, other dynamic.Interface, n int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	kinds := []struct {
		gvr  schema.GroupVersionResource
		kind string
		body func(i int) map[string]any
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap",
			func(i int) map[string]any { return map[string]any{"data": map[string]any{"n": strconv.Itoa(i)}} }},
		{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "Secret",
			func(i int) map[string]any { return map[string]any{"stringData": map[string]any{"n": strconv.Itoa(i)}} }},
		{schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, "Widget",
			func(i int) map[string]any { return map[string]any{"spec": map[string]any{"n": int64(i)}} }},
	}
	live := map[string]bool{}
	for i := 0; i < n; i++ {
		k := kinds[rng.Intn(len(kinds))]
		name := fmt.Sprintf("r%d", rng.Intn(12))
		key := k.gvr.Resource + "/" + name
		obj := &unstructured.Unstructured{Object: k.body(i)}
		obj.SetAPIVersion(k.gvr.GroupVersion().String())
		obj.SetKind(k.kind)
		obj.SetName(name)
		obj.SetNamespace("shop")
		if rng.Intn(2) == 0 {
			obj.SetLabels(map[string]string{"step": strconv.Itoa(i)})
		}
		res := plane.Resource(k.gvr).Namespace("shop")
		var err error
		switch {
		case !live[key]:
			_, err = res.Create(ctx, obj, metav1.CreateOptions{})
			live[key] = true
		case rng.Intn(3) == 0:
			err = res.Delete(ctx, name, metav1.DeleteOptions{})
			live[key] = false
		default:
			_, err = res.Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: "e2e", Force: true})
		}
		if err != nil {
			t.Fatalf("write %d (%s): %v", i, key, err)
		}
		if i%4 != 0 {
			continue
		}
		obj.SetName("other-" + name)
		if _, err := other.Resource(k.gvr).Namespace("shop").Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "e2e", Force: true}); err != nil {
			t.Fatalf("write %d in the other plane: %v", i, err)
		}
	}
}

// TestSnapshotCLI: `kplane snapshot` prints a plane's snapshot as JSON,
// YAML or a summary, with the server's own error for bad input.
func TestSnapshotCLI(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "snap-cli")
	setupShop(t, plane)
	bin, err := framework.Binary()
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"snapshot", "--data-dir", shared.DataDir}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run(plane, "-o", "json", "--resource", "configmaps,widgets", "-n", "shop", "--warm")
	if err != nil {
		t.Fatalf("kplane snapshot: %v\n%s", err, out)
	}
	var snap snapshotResponse
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	items := snap.items()
	if snap.Cluster != plane || items["/configmaps"]["shop/settings"] == nil || items["example.com/widgets"]["shop/gear"] == nil {
		t.Fatalf("-o json: %s", out)
	}

	out, err = run(plane, "-o", "yaml", "-r", "pods", "-l", "app=web")
	if err != nil || !strings.Contains(out, "cluster: "+plane) || !strings.Contains(out, "name: web-0") {
		t.Fatalf("-o yaml: %v\n%s", err, out)
	}

	out, err = run(plane)
	if err != nil {
		t.Fatalf("summary: %v\n%s", err, out)
	}
	for _, want := range []string{"plane " + plane + " at resourceVersion", "RESOURCE", "deployments.apps", "widgets.example.com", "total"} {
		if !strings.Contains(out, want) {
			t.Fatalf("summary lacks %q:\n%s", want, out)
		}
	}

	out, err = run(plane, "--resource", "gizmos")
	if err == nil || !strings.Contains(out, `unknown resource "gizmos"`) {
		t.Fatalf("unknown resource: %v\n%s", err, out)
	}
}
