package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// ResetAnnotation on a Plane marks a reset that has begun and not
// finished. It is written before the plane's records are touched and
// removed after, so a server stopped in the middle finishes the reset
// before the plane serves again: a reset happens whole or not at all.
// Its value is when the reset began and the server that does it; every
// server holds the plane's requests while it is there.
const ResetAnnotation = "kplane.dev/resetting"

// resetTakeover is how long a reset marked by another server may take
// before the plane lifecycle's holder finishes it (its server died in the
// middle): the drain of the plane's requests and then some.
const resetTakeover = drainTimeout + 30*time.Second

// HeldAnnotationPrefix followed by a server's key, on a Plane being
// reset, says that server holds the plane's requests for the reset named
// by its value (the reset mark) and has none in flight. The server that
// resets waits for it from every present server before it touches a
// record: a server that had not yet seen the mark served requests on the
// half-reset plane.
const HeldAnnotationPrefix = "reset-held.kplane.dev/"

// ResetRevisionAnnotation on a Plane is the datastore revision at which its
// last reset ended: watches from an older resourceVersion answer 410, so
// that clients list the reset plane again instead of replaying the reset.
const ResetRevisionAnnotation = "kplane.dev/reset-revision"

// ResetCachesAnnotation on a Plane, written with the end of a reset when
// servers share the datastore, is the revision of the reset's last
// deletion in each key space it deleted in ("/configmaps=123,..."). A
// server that held the plane for another server's reset lets its
// requests in once its own watch caches have reached those revisions, as
// the server that reset does (awaitCaches): a request it held would
// otherwise be admitted against a cache still showing what the reset
// deleted. One revision per key space, not the reset's last: a cache of a
// key space that sees no later write never reaches a later revision.
const ResetCachesAnnotation = "kplane.dev/reset-caches"

// ResetPath is where a plane is reset: POST /clusters/<id>/control-plane/reset.
const ResetPath = "/reset"

// Reset returns plane to where it started: its template's state, or the
// bootstrapped empty plane. Requests that arrive meanwhile wait; watches
// open in the plane are ended (their clients list again and see the reset
// state). It returns once the plane serves its reset state.
func (m *Manager) Reset(ctx context.Context, plane string) error {
	if err := m.resettable(plane); err != nil {
		return err
	}
	m.mu.Lock()
	s := m.state[plane]
	if s == nil || s.resetting {
		m.mu.Unlock()
		return apierrors.NewConflict(planeResource, plane, fmt.Errorf("the plane is being reset"))
	}
	s.resetting = true
	m.mu.Unlock()
	markedAt, err := m.markReset(ctx, plane)
	if err != nil {
		m.mu.Lock()
		s.resetting = false
		m.mu.Unlock()
		return err
	}
	// finishReset holds the plane's requests itself. A hold taken here
	// leaked when the Plane informer's reconcile of the mark had already
	// finished the reset: finishReset then returns at once, nothing
	// released the hold, and every request to the plane waited until its
	// timeout (the next reset let them in).
	return m.finishReset(ctx, plane, markedAt)
}

var planeResource = schema.GroupResource{Group: GVR.Group, Resource: GVR.Resource}

func (m *Manager) resettable(plane string) error {
	if plane == planes.Root {
		return apierrors.NewForbidden(planeResource, plane, fmt.Errorf("the root plane cannot be reset"))
	}
	phase, ok := m.Phase(plane)
	switch {
	case !ok:
		return notFound(plane)
	case phase == Terminating:
		return terminating(plane)
	case phase != Ready:
		return apierrors.NewConflict(planeResource, plane, fmt.Errorf("the plane is not ready"))
	}
	if deps := m.Dependents(plane); len(deps) > 0 {
		return apierrors.NewForbidden(planeResource, plane, fmt.Errorf("the plane is the template of %d plane(s) and is read-only while they exist", len(deps)))
	}
	return nil
}

// resetRun is one finishReset of a plane; done is closed when it ends,
// with err its result.
type resetRun struct {
	done chan struct{}
	err  error
}

func (r *resetRun) wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resetHold is a plane held for its reset: idle is closed once the
// requests inside have finished, release lets requests in again.
type resetHold struct {
	idle    <-chan struct{}
	release func()
}

// holdForReset makes the plane's new requests wait and ends its watches;
// a plane held already stays held once.
func (m *Manager) holdForReset(plane string) *resetHold {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.held[plane]; h != nil {
		return h
	}
	idle, release, ok := m.requests.hold(plane)
	if !ok {
		// Held by an earlier call whose record was dropped: wait for nothing.
		closed := make(chan struct{})
		close(closed)
		idle, release = closed, func() {}
	}
	h := &resetHold{idle: idle, release: release}
	m.held[plane] = h
	return h
}

// finishReset drops the plane's own records (and bootstraps a plane made
// from nothing again), then lets requests in. It is what a reset does
// after marking it, and what a restart does for a reset it finds marked.
// markedAt is the resourceVersion of the marked Plane that asked for it.
func (m *Manager) finishReset(ctx context.Context, plane string, markedAt uint64) (err error) {
	m.mu.Lock()
	s := m.state[plane]
	if s == nil {
		m.mu.Unlock()
		return nil
	}
	if run := s.resetRun; run != nil {
		// Another call is finishing it (a reset and the reconcile of the
		// Plane it marked): the reset request must not answer before the
		// plane is reset, whichever call does the work.
		m.mu.Unlock()
		return run.wait(ctx)
	}
	if markedAt <= s.resetDoneAt {
		// Finished between the caller's look at the mark and now: a
		// second wipe would delete what was written since.
		m.mu.Unlock()
		return nil
	}
	run := &resetRun{done: make(chan struct{})}
	s.resetRun = run
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		s.resetRun = nil
		m.mu.Unlock()
		run.err = err
		close(run.done)
	}()
	h := m.holdForReset(plane)
	began := time.Now()
	if !awaitDrained(ctx, plane, h.idle, "resetting the plane anyway") {
		return ctx.Err()
	}
	if err := m.awaitResetHolds(ctx, plane); err != nil {
		return err
	}
	wipeBegan := time.Now()
	w, err := m.wipeForReset(ctx, plane)
	if err != nil {
		return fmt.Errorf("resetting plane %s: %w", plane, err)
	}
	awaitCaches(ctx, plane, w)
	m.awaitResetFollowers(ctx, w)
	wipeTook := time.Since(wipeBegan)
	for _, f := range m.config.Forget {
		f.ForgetPlane(plane)
	}
	if _, made := m.Template(plane); !made {
		m.config.Bootstrapper.Forget(plane)
		if err := m.config.Bootstrapper.Ensure(ctx, plane); err != nil {
			return fmt.Errorf("bootstrapping plane %s after its reset: %w", plane, err)
		}
	}
	// The mark's removal is the revision the reset ends at: everything
	// the reset wrote is older.
	doneAt, err := m.markResetDone(ctx, plane, w)
	if err != nil {
		return err
	}
	m.mu.Lock()
	s.resetting = false
	s.heldForMarkAt = 0
	s.resetDoneAt = doneAt
	s.resetRevision = doneAt
	delete(m.held, plane)
	m.mu.Unlock()
	h.release()
	logrus.WithFields(logrus.Fields{"plane": plane, "records": w.records, "wipe": wipeTook.Round(time.Microsecond).String(),
		"took": time.Since(began).Round(time.Microsecond).String()}).Info("plane reset")
	return nil
}

// ackResetHold, on a server that holds a plane for another server's
// reset, says so on the Plane once its requests to the plane have ended.
func (m *Manager) ackResetHold(ctx context.Context, plane string, uid types.UID, mark string, idle <-chan struct{}) {
	if !awaitDrained(ctx, plane, idle, "telling the plane's reset to go on") {
		return
	}
	m.tellPlane(ctx, plane, uid, HeldAnnotationPrefix+serverKey(m.config.ServerName), mark,
		"telling the plane's reset this server holds it")
}

// awaitResetHolds waits until every other present server holds plane for
// the reset marked on its Plane, or drainTimeout has passed (a server
// that cannot say so, the reset goes on as a deletion does).
func (m *Manager) awaitResetHolds(ctx context.Context, plane string) error {
	if m.config.SoleServer {
		return nil
	}
	deadline := time.Now().Add(drainTimeout)
	return wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		u, err := m.planes.Get(ctx, plane, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("reading the Plane of reset plane %s: %w", plane, err)
		}
		mark := u.GetAnnotations()[ResetAnnotation]
		if mark == "" {
			return true, nil
		}
		present, err := m.presentServers(ctx)
		if err != nil {
			logrus.WithError(err).WithField("plane", plane).Debug("reset waits for the servers' holds")
			return false, nil
		}
		var waiting []string
		for _, server := range present {
			if u.GetAnnotations()[HeldAnnotationPrefix+serverKey(server)] != mark {
				waiting = append(waiting, server)
			}
		}
		if len(waiting) > 0 && time.Now().After(deadline) {
			logrus.WithField("plane", plane).Warnf("servers %s did not say they hold the plane within %s; resetting it anyway",
				describeServers(waiting), drainTimeout)
			return true, nil
		}
		return len(waiting) == 0, nil
	})
}

// markReset writes ResetAnnotation on the plane's Plane and returns the
// Plane's new resourceVersion (written to storage, see updatePlane).
func (m *Manager) markReset(ctx context.Context, plane string) (uint64, error) {
	mark := resetMark{at: time.Now(), server: m.config.ServerName}.String()
	rv, err := m.annotatePlane(ctx, plane, map[string]*string{ResetAnnotation: &mark})
	if err != nil {
		return 0, fmt.Errorf("marking the reset of plane %s: %w", plane, err)
	}
	return rv, nil
}

// markResetDone removes ResetAnnotation from the plane's Plane, with the
// revision the reset ended at and, for the other servers on the
// datastore, where its deletions are (ResetCachesAnnotation); it returns
// the Plane's new resourceVersion.
func (m *Manager) markResetDone(ctx context.Context, plane string, w wiped) (uint64, error) {
	rv, err := m.currentRevision(ctx)
	if err != nil {
		return 0, err
	}
	revision := strconv.FormatUint(rv, 10)
	annotations := map[string]*string{ResetAnnotation: nil, ResetRevisionAnnotation: &revision}
	if !m.config.SoleServer {
		caches := formatCacheRevisions(w)
		annotations[ResetCachesAnnotation] = &caches
	}
	done, err := m.annotatePlane(ctx, plane, annotations)
	if err != nil {
		return 0, fmt.Errorf("marking the end of the reset of plane %s: %w", plane, err)
	}
	return done, nil
}

// formatCacheRevisions is the value of ResetCachesAnnotation for w: the
// last deletion's revision per key space, in key order.
func formatCacheRevisions(w wiped) string {
	byPrefix := map[string]int64{}
	for s, revision := range w.upTo {
		byPrefix[s.ResourcePrefix()] = max(byPrefix[s.ResourcePrefix()], revision)
	}
	pairs := make([]string, 0, len(byPrefix))
	for _, prefix := range slices.Sorted(maps.Keys(byPrefix)) {
		pairs = append(pairs, prefix+"="+strconv.FormatInt(byPrefix[prefix], 10))
	}
	return strings.Join(pairs, ",")
}

// cacheRevisions reads ResetCachesAnnotation back as the revisions this
// server's storages must reach: every cached storage of a key space the
// reset deleted in (custom resources of one key space may have a storage
// per CRD content, each with its own cache).
func (m *Manager) cacheRevisions(value string) wiped {
	byPrefix := map[string]int64{}
	for _, pair := range strings.Split(value, ",") {
		prefix, revision, ok := strings.Cut(pair, "=")
		if r, err := strconv.ParseInt(revision, 10, 64); ok && err == nil {
			byPrefix[prefix] = r
		}
	}
	var w wiped
	if len(byPrefix) == 0 || m.config.Storage == nil {
		return w
	}
	for _, s := range m.config.Storage.Stores() {
		if revision, ok := byPrefix[s.ResourcePrefix()]; ok {
			if w.upTo == nil {
				w.upTo = map[*planestorage.Store]int64{}
			}
			w.upTo[s] = revision
		}
	}
	return w
}

// annotatePlane sets (or, for nil, removes) annotations of plane's Plane
// and returns the Plane's new resourceVersion.
func (m *Manager) annotatePlane(ctx context.Context, plane string, annotations map[string]*string) (uint64, error) {
	return m.updatePlane(ctx, plane, func(u *unstructured.Unstructured) {
		kept := u.GetAnnotations()
		if kept == nil {
			kept = map[string]string{}
		}
		for k, v := range annotations {
			if v == nil {
				delete(kept, k)
			} else {
				kept[k] = *v
			}
		}
		u.SetAnnotations(kept)
	})
}

// unfinishedResetLocked reports whether Plane u says a reset was begun and
// not finished: it carries the mark and is newer than the last reset this
// server finished.
func (m *Manager) unfinishedResetLocked(u *unstructured.Unstructured, s *state) bool {
	if _, marked := annotation(u, ResetAnnotation); !marked {
		return false
	}
	rv, err := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
	return err != nil || rv > s.resetDoneAt
}

// resetMark is the value of ResetAnnotation.
type resetMark struct {
	at     time.Time
	server string
}

func (r resetMark) String() string {
	return strings.TrimSpace(r.at.UTC().Format(time.RFC3339Nano) + " " + r.server)
}

// parseResetMark reads a mark; one of an older server holds the time
// only, and one that does not parse names no server.
func parseResetMark(value string) resetMark {
	at, server, _ := strings.Cut(value, " ")
	t, _ := time.Parse(time.RFC3339Nano, at)
	return resetMark{at: t, server: server}
}

// resetLeftTo is how long the reconcile of marked Plane u leaves its reset
// to the server that began it: nothing when that is this server (it
// stopped in the middle) or no server is named, else until resetTakeover
// after it began.
func (m *Manager) resetLeftTo(u *unstructured.Unstructured) time.Duration {
	mark := parseResetMark(u.GetAnnotations()[ResetAnnotation])
	if mark.server == "" || mark.server == m.config.ServerName {
		return 0
	}
	return max(0, resetTakeover-time.Since(mark.at))
}

// resetEndedElsewhereLocked reports whether Plane u, unmarked, ends a
// reset this server held the plane for and does not run itself.
func (m *Manager) resetEndedElsewhereLocked(u *unstructured.Unstructured, s *state) bool {
	_, marked := annotation(u, ResetAnnotation)
	return !marked && s.heldForMarkAt != 0 && s.resetRun == nil && resourceVersionOf(u) > s.heldForMarkAt
}

// releaseResetHold lets the plane's requests in again once another server
// has finished its reset (Plane u, unmarked) and this server's caches have
// seen the reset's deletions, and drops what this server kept of the
// plane's state from before. It does not block: the wait for the caches
// runs on its own.
func (m *Manager) releaseResetHold(u *unstructured.Unstructured) {
	plane := u.GetName()
	m.mu.Lock()
	s := m.state[plane]
	if s == nil || s.heldForMarkAt == 0 || s.resetRun != nil {
		m.mu.Unlock()
		return
	}
	s.resetting = false
	s.heldForMarkAt = 0
	s.resetDoneAt = resourceVersionOf(u)
	h := m.held[plane]
	m.mu.Unlock()
	for _, f := range m.config.Forget {
		f.ForgetPlane(plane)
	}
	if h == nil {
		return
	}
	w := m.cacheRevisions(u.GetAnnotations()[ResetCachesAnnotation])
	ctx := m.running.Load()
	if len(w.upTo) == 0 || ctx == nil {
		m.letInAfterReset(plane, s, h)
		return
	}
	go func() {
		awaitCaches(*ctx, plane, w)
		m.awaitResetFollowers(*ctx, w)
		m.letInAfterReset(plane, s, h)
	}()
}

// letInAfterReset releases hold h of plane, taken for another server's
// reset, unless the plane is held again meanwhile: a reset begun since
// took the same hold (holdForReset returns it) and releases it when it
// ends.
func (m *Manager) letInAfterReset(plane string, s *state, h *resetHold) {
	m.mu.Lock()
	if m.held[plane] != h || s.resetting || s.heldForMarkAt != 0 {
		m.mu.Unlock()
		return
	}
	delete(m.held, plane)
	m.mu.Unlock()
	h.release()
	logrus.WithField("plane", plane).Info("plane reset by another server")
}

func resourceVersionOf(u *unstructured.Unstructured) uint64 {
	rv, _ := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
	return rv
}

// serveReset answers POST /reset of a plane.
func (m *Manager) serveReset(w http.ResponseWriter, req *http.Request, serializer runtime.NegotiatedSerializer, plane string) {
	if req.Method != http.MethodPost {
		writeError(w, req, serializer, apierrors.NewMethodNotSupported(planeResource, req.Method))
		return
	}
	if err := m.Reset(req.Context(), plane); err != nil {
		writeError(w, req, serializer, err)
		return
	}
	status := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess,
		Code: http.StatusOK, Message: fmt.Sprintf("plane %s reset", plane)}
	responsewriters.WriteRawJSON(http.StatusOK, status, w)
}

// currentRevision is the datastore's newest revision.
func (m *Manager) currentRevision(ctx context.Context) (uint64, error) {
	for _, s := range m.config.Storage.Stores() {
		rv, err := s.GetCurrentResourceVersion(ctx)
		if err != nil {
			return 0, fmt.Errorf("reading the datastore revision: %w", err)
		}
		return rv, nil
	}
	return 0, fmt.Errorf("no storage to read the datastore revision from")
}
