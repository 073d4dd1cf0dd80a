package audit

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kplane.dev/kplane/planes"
)

// fixedPlanes is a set of planes with their uids, all at Metadata.
type fixedPlanes map[string]types.UID

func (f fixedPlanes) Lookup(plane string) (types.UID, Level, bool) {
	uid, ok := f[plane]
	return uid, DefaultLevel, ok
}

func event(plane, name string) *auditinternal.Event {
	now := metav1.NewMicroTime(time.Now())
	return &auditinternal.Event{
		Level: auditinternal.LevelMetadata, AuditID: types.UID(name), Stage: auditinternal.StageResponseComplete,
		Verb: "create", RequestURI: "/api/v1/namespaces/default/configmaps",
		ObjectRef:                &auditinternal.ObjectReference{Resource: "configmaps", Namespace: "default", Name: name},
		RequestReceivedTimestamp: now, StageTimestamp: now,
		Annotations: map[string]string{planes.Annotation: plane},
	}
}

func names(entries []entry) string {
	var out []string
	for _, e := range entries {
		out = append(out, fmt.Sprint(e.cursor))
	}
	return strings.Join(out, ",")
}

func TestRingKeepsTheNewestEventsOfEachPlane(t *testing.T) {
	known := fixedPlanes{"a": "uid-a", "b": "uid-b"}
	trails, err := NewTrails(Config{BufferEvents: 3, Planes: known})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		trails.ProcessEvents(event("a", fmt.Sprint(i)))
	}
	trails.ProcessEvents(event("b", "only"), event("gone", "nobody"), event("", "unmarked"))
	a := trails.trail("a", "uid-a").read(query{}, trails, false)
	if got := names(a.entries); got != "3,4,5" || a.oldest != 3 || a.last != 5 {
		t.Fatalf("a holds %s (oldest %d, last %d), want 3,4,5", got, a.oldest, a.last)
	}
	if got := names(trails.trail("b", "uid-b").read(query{}, trails, false).entries); got != "1" {
		t.Fatalf("b holds %s, want its one event", got)
	}
	if _, ok := trails.trails["gone"]; ok {
		t.Fatal("an event of a plane that does not exist made a trail")
	}
	if got := names(trails.trail("a", "uid-a").read(query{after: 3, limit: 1}, trails, false).entries); got != "4" {
		t.Fatalf("after 3, limit 1: %s", got)
	}
	if err := checkCursor(query{after: 1}, a); err == nil {
		t.Fatal("a cursor older than the ring was accepted")
	}
	if err := checkCursor(query{after: 9}, a); err == nil {
		t.Fatal("a cursor ahead of the trail was accepted")
	}
	if err := checkCursor(query{after: 2}, a); err != nil {
		t.Fatalf("the cursor just before the oldest event: %v", err)
	}
	// A plane deleted and made again (another uid) starts empty.
	if got := trails.trail("a", "uid-a2").read(query{}, trails, false); len(got.entries) != 0 || got.last != 0 {
		t.Fatalf("the new plane a inherited %s", names(got.entries))
	}
}

func TestLogSurvivesRestartRotatesAndGoesWithItsPlane(t *testing.T) {
	dir := t.TempDir()
	known := fixedPlanes{"a": "uid-a"}
	config := Config{BufferEvents: 4, Dir: dir, MaxFileBytes: 2000, Planes: known}
	trails, err := NewTrails(config)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		trails.ProcessEvents(event("a", fmt.Sprint(i)))
	}
	trails.Shutdown()
	if _, err := os.Stat(filepath.Join(dir, "a", rotatedName)); err != nil {
		t.Fatalf("no rotated log after 10 events of a 2000-byte log: %v", err)
	}
	// A new process reads the newest events back and continues the cursors.
	again, err := NewTrails(config)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(again.trail("a", "uid-a").read(query{}, again, false).entries); got != "7,8,9,10" {
		t.Fatalf("after a restart a holds %s, want 7,8,9,10", got)
	}
	again.ProcessEvents(event("a", "next"))
	if got := names(again.trail("a", "uid-a").read(query{after: 10}, again, false).entries); got != "11" {
		t.Fatalf("the first event after the restart is %s, want 11", got)
	}
	// A log cut short by a kill keeps its whole lines.
	f, err := os.OpenFile(filepath.Join(dir, "a", logName), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"kind":"Event","annotations":{"audit.kplane.dev/cur`)
	f.Close()
	third, _ := NewTrails(config)
	if got := names(third.trail("a", "uid-a").read(query{}, third, false).entries); got != "8,9,10,11" {
		t.Fatalf("with a torn last line a holds %s", got)
	}
	// Another plane of the same name (deleted while the server was down):
	// the sweep removes the old log.
	known["a"] = "uid-new"
	third.Sweep()
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("the old plane's log survived the sweep: %v", err)
	}
	again.ForgetPlane("a")
	if _, ok := again.trails["a"]; ok {
		t.Fatal("a forgotten plane kept its trail")
	}
}

func TestEvaluatorAppliesThePlanesLevel(t *testing.T) {
	e := NewEvaluator()
	write := authorizer.AttributesRecord{Verb: "create", Resource: "configmaps", ResourceRequest: true}
	read := authorizer.AttributesRecord{Verb: "list", Resource: "configmaps", ResourceRequest: true}
	for _, c := range []struct {
		level       Level
		write, read auditinternal.Level
	}{
		{auditinternal.LevelMetadata, auditinternal.LevelMetadata, auditinternal.LevelMetadata},
		{auditinternal.LevelRequest, auditinternal.LevelRequest, auditinternal.LevelMetadata},
		{auditinternal.LevelRequestResponse, auditinternal.LevelRequestResponse, auditinternal.LevelMetadata},
	} {
		u := &planeUser{Info: &user.DefaultInfo{Name: "u"}, level: c.level}
		write.User, read.User = u, u
		if got := e.EvaluatePolicyRule(write).Level; got != c.write {
			t.Errorf("%s: a write at %s", c.level, got)
		}
		if got := e.EvaluatePolicyRule(read).Level; got != c.read {
			t.Errorf("%s: a read at %s", c.level, got)
		}
	}
	write.User = &user.DefaultInfo{Name: "not tagged"}
	if got := e.EvaluatePolicyRule(write).Level; got != auditinternal.LevelNone {
		t.Errorf("a request without a plane level is audited at %s", got)
	}
}

func TestParseQuery(t *testing.T) {
	for raw, field := range map[string]string{
		"since=soon": "since", "limit=0": "limit", "limit=100001": "limit", "watch=perhaps": "watch",
	} {
		values, _ := url.ParseQuery(raw)
		_, _, err := parseQuery(values)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", raw, err)
		}
	}
	values, _ := url.ParseQuery("since=2026-11-24T10:00:00Z&limit=5&watch=true")
	q, watch, err := parseQuery(values)
	if err != nil || !watch || q.limit != 5 || q.from.IsZero() {
		t.Fatalf("a good query: %+v %v %v", q, watch, err)
	}
}

func TestLargeEventLosesItsBodiesNotItsMetadata(t *testing.T) {
	trails, err := NewTrails(Config{BufferEvents: 2, MaxEventBytes: 4 << 10, Planes: fixedPlanes{"a": "uid-a"}})
	if err != nil {
		t.Fatal(err)
	}
	small, large := event("a", "small"), event("a", "large")
	small.Level, large.Level = auditinternal.LevelRequestResponse, auditinternal.LevelRequestResponse
	small.RequestObject = &runtime.Unknown{Raw: []byte(`{"data":{"k":"v"}}`), ContentType: runtime.ContentTypeJSON}
	large.RequestObject = &runtime.Unknown{Raw: []byte(`{"data":{"k":"` + strings.Repeat("x", 8<<10) + `"}}`), ContentType: runtime.ContentTypeJSON}
	trails.ProcessEvents(small, large)
	got := trails.trail("a", "uid-a").read(query{}, trails, false).entries
	if len(got) != 2 {
		t.Fatalf("%d events, want 2", len(got))
	}
	if line := string(got[0].line); !strings.Contains(line, `"requestObject"`) || strings.Contains(line, TruncatedAnnotation) {
		t.Errorf("a small event lost its body: %s", line)
	}
	line := string(got[1].line)
	if len(line) > 4<<10 || strings.Contains(line, `"requestObject"`) || !strings.Contains(line, `"`+TruncatedAnnotation+`":"true"`) ||
		!strings.Contains(line, `"name":"large"`) {
		t.Errorf("a large event (%d bytes) was not cut to its metadata: %.300s", len(line), line)
	}
	// Allocation size classes round up by at most an eighth.
	if cap(got[1].line) > len(got[1].line)+len(got[1].line)/8 {
		t.Errorf("a kept line holds %d bytes for %d", cap(got[1].line), len(got[1].line))
	}
	if large.Annotations[TruncatedAnnotation] != "" || large.RequestObject == nil {
		t.Error("upstream's event was changed")
	}
}

func TestUnknownLevelIsAuditedAtTheDefault(t *testing.T) {
	u := &planeUser{Info: &user.DefaultInfo{Name: "u"}, level: "Everything"}
	attrs := authorizer.AttributesRecord{User: u, Verb: "create", Resource: "configmaps", ResourceRequest: true}
	if got := NewEvaluator().EvaluatePolicyRule(attrs).Level; got != DefaultLevel {
		t.Fatalf("unknown level evaluated at %q, want %q", got, DefaultLevel)
	}
}

// TestPlanesRecordAndFollowConcurrently: planes recording, readers
// following and a plane deleted, all at once (for the race detector); a
// follower of a deleted plane is woken and told.
func TestPlanesRecordAndFollowConcurrently(t *testing.T) {
	known := fixedPlanes{"a": "uid-a", "b": "uid-b"}
	trails, err := NewTrails(Config{BufferEvents: 16, Dir: t.TempDir(), MaxFileBytes: 4 << 10, Planes: known})
	if err != nil {
		t.Fatal(err)
	}
	waiting := trails.trail("b", "uid-b").read(query{}, trails, true)
	var wg sync.WaitGroup
	for _, plane := range []string{"a", "b"} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 200 {
				trails.ProcessEvents(event(plane, fmt.Sprint(i)))
			}
		}()
		go func() {
			defer wg.Done()
			var after uint64
			for range 50 {
				p := trails.trail(plane, types.UID("uid-"+plane)).read(query{after: after}, trails, true)
				for _, e := range p.entries {
					if !strings.Contains(string(e.line), `"kplane.dev/plane":"`+plane+`"`) {
						t.Errorf("an event of another plane in %s's trail: %s", plane, e.line)
					}
					after = e.cursor
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-waiting.changed:
	case <-time.After(10 * time.Second):
		t.Fatal("a follower was not woken by new events")
	}
	follower := trails.trail("a", "uid-a").read(query{}, trails, true)
	trails.ForgetPlane("a")
	select {
	case <-follower.changed:
	case <-time.After(10 * time.Second):
		t.Fatal("a follower of a deleted plane was not woken")
	}
	if p := trails.trail("a", "uid-a").read(query{}, trails, false); len(p.entries) != 0 {
		t.Fatalf("a deleted plane's trail still holds %d events", len(p.entries))
	}
}

// lockedResponse is a ResponseWriter a test reads while follow writes.
type lockedResponse struct {
	mu   sync.Mutex
	body strings.Builder
}

func (r *lockedResponse) Header() http.Header { return http.Header{} }
func (r *lockedResponse) WriteHeader(int)     {}
func (r *lockedResponse) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body.Write(p)
}
func (r *lockedResponse) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body.String()
}

// TestFollowFromATimeAfterTheRingWrapped: a follower whose since= time
// left every kept event out is not taken for one the ring has moved past.
func TestFollowFromATimeAfterTheRingWrapped(t *testing.T) {
	trails, err := NewTrails(Config{BufferEvents: 3, Planes: fixedPlanes{"a": "uid-a"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		trails.ProcessEvents(event("a", fmt.Sprint(i)))
	}
	tr := trails.trail("a", "uid-a")
	q := query{from: time.Now().Add(time.Minute)}
	first := tr.read(q, trails, true)
	if len(first.entries) != 0 || checkCursor(q, first) != nil {
		t.Fatalf("first page of a later time: %s", names(first.entries))
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &lockedResponse{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		follow(ctx, w, tr, trails, q, first)
	}()
	later := event("a", "new")
	later.StageTimestamp = metav1.NewMicroTime(q.from.Add(time.Second))
	trails.ProcessEvents(later)
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-done:
			return false, fmt.Errorf("the follower ended")
		default:
			return strings.Contains(w.String(), `"name":"new"`), nil
		}
	})
	if err != nil {
		t.Fatalf("the new event was not followed (%v): %q", err, w.String())
	}
	cancel()
	<-done
}

// TestSweepSparesATrailMadeBeforeIt: after a restart, a request to a
// plane made again while the server was down has its trail before the
// sweep reads the stale log; the sweep must not end that trail.
func TestSweepSparesATrailMadeBeforeIt(t *testing.T) {
	dir := t.TempDir()
	known := fixedPlanes{"a": "uid-old"}
	config := Config{BufferEvents: 4, Dir: dir, Planes: known}
	before, err := NewTrails(config)
	if err != nil {
		t.Fatal(err)
	}
	before.ProcessEvents(event("a", "old"))
	before.Shutdown()

	known["a"] = "uid-new"
	after, err := NewTrails(config)
	if err != nil {
		t.Fatal(err)
	}
	tr := after.trail("a", "uid-new") // the request has its trail, not yet its event
	after.Sweep()
	if err := tr.record(event("a", "new"), after); err != nil {
		t.Fatal(err)
	}
	got := after.trail("a", "uid-new").read(query{}, after, false).entries
	if len(got) != 1 || !strings.Contains(string(got[0].line), `"name":"new"`) || got[0].cursor != 1 {
		t.Fatalf("the new plane's trail after the sweep holds %s", names(got))
	}
}
