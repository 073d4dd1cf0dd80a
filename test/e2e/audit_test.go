package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"kplane.dev/kplane/test/e2e/framework"
)

const auditCursor = "audit.kplane.dev/cursor"

// readAudit sends GET /audit?query to plane with token (the admin's when
// empty) and returns the status code, the events and the body.
func readAudit(t *testing.T, s *framework.Server, plane, token, query string) (int, []auditv1.Event, []byte) {
	t.Helper()
	if token == "" {
		token = s.AdminToken()
	}
	req, err := http.NewRequest(http.MethodGet, s.PlaneURL(plane)+"/audit?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, body
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("audit content type %q", ct)
	}
	return resp.StatusCode, decodeEvents(t, body), body
}

func decodeEvents(t *testing.T, body []byte) []auditv1.Event {
	t.Helper()
	var events []auditv1.Event
	for _, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if ev.APIVersion != "audit.k8s.io/v1" || ev.Kind != "Event" {
			t.Fatalf("audit line is not an audit.k8s.io/v1 Event: %s", line)
		}
		events = append(events, ev)
	}
	return events
}

func cursorOf(t *testing.T, ev auditv1.Event) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(ev.Annotations[auditCursor], 10, 64)
	if err != nil {
		t.Fatalf("event %s without a cursor: %v", ev.AuditID, ev.Annotations)
	}
	return n
}

// step is what a kubectl command must leave in the trail.
type step struct {
	verb, resource, name string
	code                 int32
}

func (s step) String() string {
	return fmt.Sprintf("%s %s/%s -> %d", s.verb, s.resource, s.name, s.code)
}

// kubectlSteps are the trail's events of kubectl on namespaces and
// configmaps, in order.
func kubectlSteps(events []auditv1.Event) []step {
	var out []step
	for _, ev := range events {
		if !strings.HasPrefix(ev.UserAgent, "kubectl") || ev.ObjectRef == nil || ev.ResponseStatus == nil {
			continue
		}
		if r := ev.ObjectRef.Resource; r != "namespaces" && r != "configmaps" {
			continue
		}
		out = append(out, step{ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name, ev.ResponseStatus.Code})
	}
	return out
}

// TestAuditTrailOfKubectl: a scripted series of kubectl commands in plane
// A is in A's trail, in order, with the verbs and codes the server gave
// (refusals included); B's trail holds none of it.
func TestAuditTrailOfKubectl(t *testing.T) {
	framework.RequireCommand(t, "kubectl", "install kubectl")
	t.Parallel()
	s := shared
	a, b := uniquePlane(t, "audit-a"), uniquePlane(t, "audit-b")
	script := []struct {
		args []string
		fail bool
	}{
		{args: []string{"create", "namespace", "shop"}},
		{args: []string{"-n", "shop", "create", "configmap", "cfg", "--from-literal=a=b"}},
		{args: []string{"-n", "shop", "get", "configmap", "cfg"}},
		{args: []string{"-n", "shop", "get", "configmap", "missing"}, fail: true},
		{args: []string{"-n", "shop", "create", "configmap", "cfg", "--from-literal=a=b"}, fail: true},
		{args: []string{"-n", "shop", "delete", "configmap", "cfg", "--wait=false"}},
	}
	for _, cmd := range script {
		out, err := s.Kubectl(t, a, "", cmd.args...)
		if (err != nil) != cmd.fail {
			t.Fatalf("kubectl %s: err %v (want failure: %t)\n%s", strings.Join(cmd.args, " "), err, cmd.fail, out)
		}
	}
	s.MustKubectl(t, b, "", "create", "configmap", "only-in-b")
	want := []step{
		{"create", "namespaces", "shop", 201},
		{"create", "configmaps", "cfg", 201},
		{"get", "configmaps", "cfg", 200},
		{"get", "configmaps", "missing", 404},
		// kubectl looks at the namespace after a 404.
		{"get", "namespaces", "shop", 200},
		{"create", "configmaps", "cfg", 409},
		{"delete", "configmaps", "cfg", 200},
	}
	var events []auditv1.Event
	eventually(t, framework.DefaultTimeout, "kubectl's requests in the trail of "+a, func() (bool, error) {
		code, evs, body := readAudit(t, s, a, "", "")
		if code != http.StatusOK {
			return false, fmt.Errorf("GET audit: %d %s", code, body)
		}
		events = evs
		got := kubectlSteps(evs)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return false, fmt.Errorf("kubectl in the trail:\n got %v\nwant %v", got, want)
		}
		return true, nil
	})
	var last uint64
	for _, ev := range events {
		if p := ev.Annotations["kplane.dev/plane"]; p != a {
			t.Errorf("event %s of plane %q in %s's trail", ev.AuditID, p, a)
		}
		if c := cursorOf(t, ev); c <= last {
			t.Errorf("cursor %d after %d: not in order", c, last)
		} else {
			last = c
		}
		if ev.RequestReceivedTimestamp.IsZero() || ev.StageTimestamp.Before(&ev.RequestReceivedTimestamp) {
			t.Errorf("event %s: stage %s before request %s", ev.AuditID, ev.StageTimestamp, ev.RequestReceivedTimestamp)
		}
		if ev.Level != "Metadata" || ev.RequestObject != nil || ev.ResponseObject != nil {
			t.Errorf("event %s at the default level: level %s, bodies %v %v", ev.AuditID, ev.Level, ev.RequestObject, ev.ResponseObject)
		}
		if strings.HasPrefix(ev.UserAgent, "kubectl") && (ev.User.Username == "" || len(ev.User.Groups) == 0) {
			t.Errorf("event %s without its user: %+v", ev.AuditID, ev.User)
		}
	}

	_, inB, _ := readAudit(t, s, b, "", "")
	for _, ev := range inB {
		if p := ev.Annotations["kplane.dev/plane"]; p != b {
			t.Errorf("event %s of plane %q in %s's trail", ev.AuditID, p, b)
		}
		if ev.ObjectRef != nil && (ev.ObjectRef.Namespace == "shop" || ev.ObjectRef.Name == "shop") {
			t.Errorf("%s's request in %s's trail: %s %s", a, b, ev.Verb, ev.RequestURI)
		}
	}
	if got := kubectlSteps(inB); len(got) != 1 || got[0] != (step{"create", "configmaps", "only-in-b", 201}) {
		t.Errorf("kubectl in %s's trail: %v", b, got)
	}
}

// TestAuditLevelRequestResponse: a plane at RequestResponse records the
// bodies of writes, not of reads; the level changes at runtime.
func TestAuditLevelRequestResponse(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	plane := uniquePlane(t, "audit-rr")
	client := s.Client(t, plane)
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"audit":{"level":"RequestResponse"}}}`)
	if _, err := s.Dynamic(t, "root").Resource(planeGVR).Patch(ctx, plane, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, framework.DefaultTimeout, "writes of "+plane+" recorded with their bodies", func() (bool, error) {
		name := fmt.Sprintf("after-%d", time.Now().UnixNano())
		if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			return false, err
		}
		if _, err := client.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		_, events, _ := readAudit(t, s, plane, "", "")
		var create, get *auditv1.Event
		for i, ev := range events {
			if ev.ObjectRef != nil && ev.ObjectRef.Name == name {
				switch ev.Verb {
				case "create":
					create = &events[i]
				case "get":
					get = &events[i]
				}
			}
		}
		if create == nil || get == nil {
			return false, fmt.Errorf("create and get of %s not both in the trail", name)
		}
		if create.Level != "RequestResponse" || create.RequestObject == nil || create.ResponseObject == nil ||
			!bytes.Contains(create.RequestObject.Raw, []byte(`"k":"v"`)) {
			return false, fmt.Errorf("create at %s with request %v response %v", create.Level, create.RequestObject, create.ResponseObject)
		}
		if get.Level != "Metadata" || get.ResponseObject != nil {
			t.Errorf("a read at level %s with a response body: reads stay at Metadata", get.Level)
		}
		return true, nil
	})
	_, events, _ := readAudit(t, s, plane, "", "")
	for _, ev := range events {
		if ev.ObjectRef != nil && ev.ObjectRef.Name == "before" && ev.Verb == "create" && ev.RequestObject != nil {
			t.Errorf("a write made at Metadata holds its body")
		}
	}
}

// TestAuditPermission: a plane-bound identity reads its plane's trail only
// when the plane's RBAC allows get (and watch, to follow) on kplane.dev
// audit; without it the answer is a 403 Status.
func TestAuditPermission(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	plane := uniquePlane(t, "audit-rbac")
	admin := s.Client(t, plane)
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "agent", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	var code int
	var body []byte
	// The token authenticates once the account is in the server's cache.
	eventually(t, framework.DefaultTimeout, "the agent's token authenticates", func() (bool, error) {
		code, _, body = readAudit(t, s, plane, token, "")
		return code != http.StatusUnauthorized, nil
	})
	if code != http.StatusForbidden {
		t.Fatalf("audit read without permission: %d %s", code, body)
	}
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil || status.Kind != "Status" || status.Reason != metav1.StatusReasonForbidden ||
		status.Details == nil || status.Details.Group != "kplane.dev" || status.Details.Kind != "audit" {
		t.Fatalf("403 is not a Status naming kplane.dev audit: %v %s", err, body)
	}

	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "audit-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"kplane.dev"}, Resources: []string{"audit"}, Verbs: []string{"get"}}}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent-reads-audit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "audit-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "agent"}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, framework.DefaultTimeout, "the agent reads the trail once bound", func() (bool, error) {
		code, events, body := readAudit(t, s, plane, token, "")
		if code != http.StatusOK {
			return false, fmt.Errorf("%d %s", code, body)
		}
		for _, ev := range events {
			if ev.Verb == "get" && strings.HasPrefix(ev.RequestURI, "/audit") && ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403 &&
				ev.User.Username == "system:serviceaccount:default:agent" {
				return true, nil
			}
		}
		return false, fmt.Errorf("the refused read is not in the trail")
	})
	// The token request is recorded with its subresource.
	_, events, _ := readAudit(t, s, plane, "", "")
	tokenRequested := false
	for _, ev := range events {
		if r := ev.ObjectRef; r != nil && ev.Verb == "create" && r.Resource == "serviceaccounts" && r.Subresource == "token" &&
			r.Namespace == "default" && r.Name == "agent" && ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusCreated {
			tokenRequested = true
		}
	}
	if !tokenRequested {
		t.Errorf("the agent's token request (serviceaccounts/token) is not in the trail")
	}
	// get does not grant following.
	if code, _, body := readAudit(t, s, plane, token, "watch=true"); code != http.StatusForbidden {
		t.Fatalf("watch with get only: %d %s", code, body)
	}
	// Another plane's trail stays closed to the agent (its token is not
	// valid there at all).
	if code, _, _ := readAudit(t, s, uniquePlane(t, "audit-other"), token, ""); code != http.StatusUnauthorized {
		t.Fatalf("agent reading another plane's trail: %d", code)
	}
}

// TestAuditBadInput: bad query parameters are 400 naming the parameter; a
// bad level is refused at admission with its field path.
func TestAuditBadInput(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "audit-bad")
	if _, err := s.Client(t, plane).CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for query, field := range map[string]string{
		"since=yesterday": "since", "limit=0": "limit", "limit=-3": "limit", "limit=ten": "limit", "watch=maybe": "watch",
	} {
		code, _, body := readAudit(t, s, plane, "", query)
		var status metav1.Status
		if code != http.StatusBadRequest || json.Unmarshal(body, &status) != nil || status.Details == nil ||
			len(status.Details.Causes) != 1 || status.Details.Causes[0].Field != field {
			t.Errorf("?%s: want 400 with field %s, got %d %s", query, field, code, body)
		}
	}
	// A cursor the trail cannot resume from.
	if code, _, body := readAudit(t, s, plane, "", "since=999999"); code != http.StatusGone {
		t.Errorf("cursor ahead of the trail: %d %s", code, body)
	}
	patch := []byte(`{"spec":{"audit":{"level":"Everything"}}}`)
	_, err := s.Dynamic(t, "root").Resource(planeGVR).Patch(context.Background(), plane, types.MergePatchType, patch, metav1.PatchOptions{})
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !asStatus(err, &status) || !hasCause(status.Status(), "spec.audit.level") {
		t.Fatalf("bad audit level: want 422 on spec.audit.level, got %v", err)
	}
}

func hasCause(status metav1.Status, field string) bool {
	if status.Details == nil {
		return false
	}
	for _, c := range status.Details.Causes {
		if c.Field == field {
			return true
		}
	}
	return false
}

// TestAuditBoundedDurableAndForgotten: with a small buffer and --audit-dir
// a trail holds its newest events only, is the same after a kill -9 and a
// restart, continues its cursors, and a deleted plane made again starts
// with an empty trail (its log gone from the disk).
func TestAuditBoundedDurableAndForgotten(t *testing.T) {
	t.Parallel()
	auditDir := t.TempDir()
	const size = 25
	s := framework.StartServer(t, framework.Options{Args: []string{
		"--audit-buffer-events", strconv.Itoa(size), "--audit-dir", auditDir, "--simulation=false"}})
	ctx := context.Background()
	plane := "bounded"
	client := s.Client(t, plane)
	for i := range 40 {
		if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var before []auditv1.Event
	var beforeBody []byte
	eventually(t, framework.DefaultTimeout, "the trail at its size, ending with the last create", func() (bool, error) {
		_, before, beforeBody = readAudit(t, s, plane, "", "")
		if len(before) != size {
			return false, fmt.Errorf("%d events, want %d", len(before), size)
		}
		for _, ev := range before {
			if ev.ObjectRef != nil && ev.ObjectRef.Name == "cm-39" && ev.Verb == "create" {
				return true, nil
			}
		}
		var got []string
		for _, ev := range before {
			got = append(got, ev.Verb+" "+ev.RequestURI+" "+ev.User.Username)
		}
		return false, fmt.Errorf("create of cm-39 not in the trail: %s", strings.Join(got, "\n"))
	})
	for i := 1; i < len(before); i++ {
		if cursorOf(t, before[i]) != cursorOf(t, before[i-1])+1 {
			t.Fatalf("cursors not consecutive: %d then %d", cursorOf(t, before[i-1]), cursorOf(t, before[i]))
		}
	}
	if first := cursorOf(t, before[0]); first < 40-size {
		t.Fatalf("oldest cursor %d: the trail keeps older events than its size", first)
	}
	if _, err := os.Stat(filepath.Join(auditDir, plane, "audit.jsonl")); err != nil {
		t.Fatalf("no log on disk: %v", err)
	}

	// Every event a reader saw was written before it was served.
	s.Kill()
	s.Restart(t)
	_, after, _ := readAudit(t, s, plane, "", "")
	byCursor := map[uint64]string{}
	for _, line := range bytes.Split(bytes.TrimSpace(mustBody(t, s, plane)), []byte("\n")) {
		var ev auditv1.Event
		if err := json.Unmarshal(line, &ev); err == nil {
			byCursor[cursorOf(t, ev)] = string(line)
		}
	}
	lines := bytes.Split(bytes.TrimSpace(beforeBody), []byte("\n"))
	kept := 0
	for i, ev := range before {
		if line, ok := byCursor[cursorOf(t, ev)]; ok {
			kept++
			if line != string(lines[i]) {
				t.Errorf("event %d changed across kill -9 and restart:\n%s\n%s", cursorOf(t, ev), lines[i], line)
			}
		}
	}
	if kept < size-3 || len(after) != size {
		t.Fatalf("after kill -9 and restart: %d of the %d events seen before kept, trail of %d", kept, size, len(after))
	}
	if last := cursorOf(t, after[len(after)-1]); last <= cursorOf(t, before[len(before)-1]) {
		t.Fatalf("cursor %d after the restart does not continue from %d", last, cursorOf(t, before[len(before)-1]))
	}

	if out, err := kplaneCmd(t, s, "planes", "delete", plane); err != nil {
		t.Fatalf("kplane planes delete: %v\n%s", err, out)
	}
	eventually(t, framework.DefaultTimeout, "plane "+plane+" deleted", func() (bool, error) {
		_, err := s.Dynamic(t, "root").Resource(planeGVR).Get(ctx, plane, metav1.GetOptions{})
		return gone(err)
	})
	if _, err := os.Stat(filepath.Join(auditDir, plane)); !os.IsNotExist(err) {
		t.Fatalf("the deleted plane's log is still on disk: %v", err)
	}
	if _, err := s.Client(t, plane).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, fresh, _ := readAudit(t, s, plane, "", "")
	for _, ev := range fresh {
		if ev.ObjectRef != nil && strings.HasPrefix(ev.ObjectRef.Name, "cm-") {
			t.Fatalf("the recreated plane's trail holds the old plane's %s %s", ev.Verb, ev.ObjectRef.Name)
		}
	}
	if len(fresh) == 0 || cursorOf(t, fresh[0]) != 1 {
		t.Fatalf("the recreated plane's trail does not start at cursor 1: %d events", len(fresh))
	}
}

func mustBody(t *testing.T, s *framework.Server, plane string) []byte {
	t.Helper()
	code, _, body := readAudit(t, s, plane, "", "")
	if code != http.StatusOK {
		t.Fatalf("GET audit of %s: %d %s", plane, code, body)
	}
	return body
}

// TestAuditFollowCLI: `kplane audit <id> -f` prints a request made after it
// started; `kplane audit <id> --limit` prints that many.
func TestAuditFollowCLI(t *testing.T) {
	framework.RequireCommand(t, "kubectl", "install kubectl")
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "audit-follow")
	s.MustKubectl(t, plane, "", "create", "configmap", "first")
	bin, _ := framework.Binary()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "audit", plane, "-f", "-o", "json", "--data-dir", s.DataDir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	stderr := &lockedWriter{mu: &mu}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	var seen []string
	go func() {
		scanner := bufio.NewScanner(stdout)
		scanner.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for scanner.Scan() {
			mu.Lock()
			seen = append(seen, scanner.Text())
			mu.Unlock()
		}
	}()
	contains := func(name string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, line := range seen {
			if strings.Contains(line, `"name":"`+name+`"`) && strings.Contains(line, `"verb":"create"`) {
				return nil
			}
		}
		return fmt.Errorf("%d lines, none the create of %s (stderr %q)", len(seen), name, stderr.buf.String())
	}
	framework.Eventually(t, framework.DefaultTimeout, "the backlog printed", func(context.Context) error { return contains("first") })
	s.MustKubectl(t, plane, "", "create", "configmap", "second")
	framework.Eventually(t, framework.DefaultTimeout, "a new request printed by -f", func(context.Context) error { return contains("second") })

	out, err := exec.Command(bin, "audit", plane, "--limit", "2", "--data-dir", s.DataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("kplane audit --limit 2: %v\n%s", err, out)
	}
	if n := len(strings.Split(strings.TrimSpace(string(out)), "\n")); n != 2 || !strings.HasPrefix(string(out), "1\t") {
		t.Fatalf("kplane audit --limit 2 printed %d lines:\n%s", n, out)
	}
	out, err = exec.Command(bin, "audit", plane, "--since", "x", "--data-dir", s.DataDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "since") {
		t.Fatalf("kplane audit --since x: %v\n%s", err, out)
	}
}

// lockedWriter collects a command's output under the lock its reader
// takes.
type lockedWriter struct {
	mu  *sync.Mutex
	buf bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// TestAuditTrailStartsAfreshOnReset: a reset ends an episode, and the
// plane's trail with it: the new trail starts at cursor 1, holds the reset
// request and nothing of the episode before.
func TestAuditTrailStartsAfreshOnReset(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	plane := uniquePlane(t, "audit-reset")
	if _, err := s.Client(t, plane).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "episode-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	recorded := func(events []auditv1.Event) bool {
		for _, ev := range events {
			if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Name == "episode-1" {
				return true
			}
		}
		return false
	}
	eventually(t, framework.DefaultTimeout, "the episode's create in the trail", func() (bool, error) {
		_, events, _ := readAudit(t, s, plane, "", "")
		return recorded(events), nil
	})
	if code := resetPlane(t, s, plane); code != http.StatusOK {
		t.Fatalf("reset %s: %d", plane, code)
	}
	// The reset's own event is recorded as its request ends, which may
	// be just after its client has the answer.
	var events []auditv1.Event
	var body []byte
	eventually(t, framework.DefaultTimeout, "the reset in the trail", func() (bool, error) {
		var code int
		code, events, body = readAudit(t, s, plane, "", "")
		if code != http.StatusOK {
			return false, fmt.Errorf("GET audit after the reset: %d %s", code, body)
		}
		for _, ev := range events {
			if ev.RequestURI == "/reset" && ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusOK {
				return true, nil
			}
		}
		return false, nil
	})
	if recorded(events) {
		t.Fatal("the episode before the reset is still in the trail")
	}
	if cursorOf(t, events[0]) != 1 {
		t.Fatalf("after the reset the trail does not start at cursor 1:\n%s", body)
	}
}
