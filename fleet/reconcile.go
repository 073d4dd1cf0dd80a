package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
)

// probeRetry is when members whose readyz did not answer ok are probed
// again.
const probeRetry = time.Second

// reconcile brings one Fleet closer to what it asks for. It returns when
// to look at the Fleet again (0: when something changes).
func (c *Controller) reconcile(ctx context.Context, name string) (time.Duration, error) {
	obj, exists, err := c.fleetInformer.GetStore().GetByKey(name)
	if err != nil {
		return 0, err
	}
	if !exists {
		c.forget(name)
		return 0, nil
	}
	f := &Fleet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, f); err != nil {
		return 0, fmt.Errorf("decoding Fleet %s: %w", name, err)
	}
	if f.Spec.DeletionPolicy == "" {
		f.Spec.DeletionPolicy = Retain
	}
	if f.DeletionTimestamp != nil {
		return c.finalize(ctx, f)
	}
	if !hasFinalizer(f) {
		// Before any member exists: a Fleet deleted from now on lets its
		// members go according to its policy. The update requeues it.
		return 0, c.setFinalizers(ctx, f, append(f.Finalizers, Finalizer))
	}
	return c.sync(ctx, f)
}

// sync provisions, adopts, probes and lets go of members, then writes the
// Fleet's status once.
func (c *Controller) sync(ctx context.Context, f *Fleet) (time.Duration, error) {
	now := time.Now()
	names := MemberNames(f)
	w := c.observeMembers(f.Name, names, now)

	var after time.Duration
	requeue := func(d time.Duration) {
		if d > 0 && (after == 0 || d < after) {
			after = d
		}
	}
	if len(w.toCreate) > 0 {
		requeue(c.create(f, w.state, names, w.toCreate, w.members, now))
	}
	adoptErr := c.forEach(ctx, w.toAdopt, func(ctx context.Context, i int) error {
		return c.adopt(ctx, f.Name, names[i])
	})
	if err := c.letGo(ctx, f); err != nil {
		return 0, err
	}
	settingsErr := c.applySettings(ctx, f, names, w.planeUIDs)
	if c.probeMembers(ctx, w) {
		requeue(probeRetry)
	}

	st := buildStatus(f, w.members, metav1.NewTime(now).Rfc3339Copy())
	d, err := c.writeStatus(ctx, f, w.state, st, now)
	if err != nil {
		return 0, err
	}
	requeue(d)
	if err := errors.Join(adoptErr, settingsErr); err != nil {
		return 0, err
	}
	if d, err = c.expire(ctx, f, st, now); err != nil {
		return 0, err
	}
	requeue(d)
	return after, nil
}

// memberWork is what one sync found of a Fleet's members (by index in
// its member names) and has to do about them.
type memberWork struct {
	state   *fleetState
	members []observed
	// planeUIDs are the UIDs of the members' planes owned by the Fleet.
	planeUIDs []types.UID
	toCreate  []int
	toAdopt   []int
	toProbe   []int
}

// observeMembers reads each member's plane from the informer: its phase
// in the Fleet's status, and whether it is to be created, adopted or
// probed.
func (c *Controller) observeMembers(fleet string, names []string, now time.Time) *memberWork {
	w := &memberWork{members: make([]observed, len(names)), planeUIDs: make([]types.UID, len(names))}
	contested := map[string]struct{}{}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.fleetState(fleet)
	w.state = s
	for i, n := range names {
		m := &w.members[i]
		*m = observed{name: n, phase: MemberPending}
		obj, ok, _ := c.config.Planes.GetIndexer().GetByKey(n)
		if !ok {
			m.message = "creating the plane"
			_, queued := s.provisioning[n]
			if at, recent := s.created[n]; !queued && (!recent || now.Sub(at) > createdMemory) {
				w.toCreate = append(w.toCreate, i)
			}
			continue
		}
		delete(s.created, n)
		p := obj.(*unstructured.Unstructured)
		owner := ownerOf(p)
		switch {
		case owner != fleet && owner != "" && c.fleetExists(owner):
			m.phase = MemberFailed
			m.message = fmt.Sprintf("the plane is a member of Fleet %s", owner)
			contested[n] = struct{}{}
		case p.GetDeletionTimestamp() != nil:
			m.message = "the plane is being deleted; it is created again once it is gone"
		case owner != fleet:
			m.message = "adopting the plane"
			w.toAdopt = append(w.toAdopt, i)
		default:
			w.planeUIDs[i] = p.GetUID()
			c.observeOwned(w, i, p)
		}
	}
	c.setContested(fleet, s, contested)
	return w
}

// observeOwned sets the phase of member i, whose plane p the Fleet owns:
// Ready once the plane is and its readyz answered ok. c.mu is held.
func (c *Controller) observeOwned(w *memberWork, i int, p *unstructured.Unstructured) {
	m := &w.members[i]
	phase, _, _ := unstructured.NestedString(p.Object, "status", "phase")
	switch _, probed := c.readyz[p.GetUID()]; {
	case lifecycle.Phase(phase) != lifecycle.Ready:
		m.message = "the plane is being bootstrapped"
	case probed:
		m.phase, m.message = MemberReady, ""
	default:
		m.message = "waiting for the plane's readyz"
		w.toProbe = append(w.toProbe, i)
	}
}

// probeMembers asks the readyz of the members to probe; those that answer ok
// are Ready from now on. It reports whether one did not.
func (c *Controller) probeMembers(ctx context.Context, w *memberWork) (retry bool) {
	var mu sync.Mutex
	_ = c.forEach(ctx, w.toProbe, func(ctx context.Context, i int) error {
		err := c.probeReadyz(ctx, w.members[i].name)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			w.members[i].message = err.Error()
			retry = true
			return nil
		}
		w.members[i].phase, w.members[i].message = MemberReady, ""
		c.mu.Lock()
		c.readyz[w.planeUIDs[i]] = struct{}{}
		c.mu.Unlock()
		return nil
	})
	return retry
}

// create queues missing members for the provisioners, lowest index
// first. After a failed create no member is queued until retryAt (1s,
// doubling to 30s), so that a Fleet over the plane limit does not hammer
// the server; until then the missing members report the error.
func (c *Controller) create(f *Fleet, s *fleetState, names []string, toCreate []int, members []observed, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(s.retryAt) {
		c.reportCreateError(s, toCreate, members)
		return s.retryAt.Sub(now)
	}
	for _, i := range toCreate {
		s.provisioning[names[i]] = struct{}{}
		c.provisions.Add(member{fleet: f.Name, plane: names[i], template: f.Spec.Template})
	}
	return 0
}

// provisioner creates the queued members one at a time.
func (c *Controller) provisioner(ctx context.Context) {
	for {
		m, shutdown := c.provisions.Get()
		if shutdown {
			return
		}
		c.provision(ctx, m)
		c.provisions.Done(m)
	}
}

// provision creates and bootstraps one member, unless its Fleet is gone,
// being deleted or waiting out a failed create, then has the Fleet
// reconciled. While a member is provisioned it counts as provisioning, so
// a deleted Fleet is not released before the Plane it creates.
func (c *Controller) provision(ctx context.Context, m member) {
	c.mu.Lock()
	s := c.state[m.fleet]
	f, live := c.liveFleet(m.fleet)
	skip := s == nil || time.Now().Before(s.retryAt) || !live || !IsMember(f, m.plane)
	c.mu.Unlock()
	if !skip {
		err := c.createPlane(ctx, m, f)
		if err == nil {
			c.bootstrap(ctx, m.plane)
		}
		now := time.Now()
		c.mu.Lock()
		if err == nil {
			s.created[m.plane] = now
			s.createError, s.createFailed, s.createBackoff = "", false, 0
		} else if !now.Before(s.retryAt) {
			// The first failure since the last wait: wait longer.
			s.createError = err.Error()
			s.createFailed = isCallerError(err)
			s.createBackoff = min(max(2*s.createBackoff, time.Second), 30*time.Second)
			s.retryAt = now.Add(s.createBackoff)
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	if s != nil {
		delete(s.provisioning, m.plane)
	}
	c.mu.Unlock()
	c.queue.AddAfter(m.fleet, eventDelay)
}

// liveFleet returns the name and spec of a Fleet that exists and is not
// being deleted (a member queued before a scale-down may no longer be
// asked for); callers hold c.mu.
func (c *Controller) liveFleet(name string) (*Fleet, bool) {
	obj, ok, _ := c.fleetInformer.GetStore().GetByKey(name)
	if !ok {
		return nil, false
	}
	u := obj.(*unstructured.Unstructured)
	if u.GetDeletionTimestamp() != nil {
		return nil, false
	}
	// The spec only: the status of a large Fleet is most of the object.
	f := &Fleet{ObjectMeta: metav1.ObjectMeta{Name: name}}
	spec, _ := u.Object["spec"].(map[string]any)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &f.Spec); err != nil {
		return nil, false
	}
	return f, true
}

func (c *Controller) reportCreateError(s *fleetState, missing []int, members []observed) {
	for _, i := range missing {
		if s.createFailed {
			members[i].phase, members[i].message = MemberFailed, s.createError
		} else {
			members[i].message = "creating the plane, retrying after: " + s.createError
		}
	}
}

// isCallerError tells errors a retry does not fix by itself (the plane
// limit, an invalid name) from transient ones.
func isCallerError(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// createPlane creates member m with f's settings, so that its first Pods
// already run, and its first requests are held, as the Fleet says.
func (c *Controller) createPlane(ctx context.Context, m member, f *Fleet) error {
	name := m.plane
	plane := lifecycle.NewPlane(name)
	plane.Labels = map[string]string{Label: m.fleet}
	plane.Spec.Template = m.template
	plane.Spec.Simulation, plane.Spec.Limits, plane.Spec.Audit = f.Spec.Simulation, f.Spec.Limits, f.Spec.Audit
	settings, err := memberSettings(f)
	if err != nil {
		return err
	}
	for _, s := range settings {
		if digest := s.digest(); digest != "" {
			if plane.Annotations == nil {
				plane.Annotations = map[string]string{}
			}
			plane.Annotations[s.annotation] = digest
		}
	}
	_, err = c.planes.Create(ctx, plane.Unstructured(), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Created by an earlier reconcile the informer has not shown yet,
		// or by someone else: the next reconcile sees which.
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating plane %s: %w", name, err)
	}
	return nil
}

// adopt labels a Plane that belongs to no live Fleet. The resourceVersion
// makes two Fleets adopting the same plane at once conflict.
func (c *Controller) adopt(ctx context.Context, fleet, name string) error {
	obj, ok, _ := c.config.Planes.GetIndexer().GetByKey(name)
	if !ok {
		return nil
	}
	p := obj.(*unstructured.Unstructured)
	return c.patchPlane(ctx, name, map[string]any{"metadata": map[string]any{
		"labels": map[string]any{Label: fleet}, "resourceVersion": p.GetResourceVersion()}})
}

// letGo removes the members f no longer asks for, according to its
// deletion policy.
func (c *Controller) letGo(ctx context.Context, f *Fleet) error {
	owned, err := c.config.Planes.GetIndexer().ByIndex(byFleet, f.Name)
	if err != nil {
		return err
	}
	byName := make(map[string]*unstructured.Unstructured, len(owned))
	names := make([]string, 0, len(owned))
	for _, obj := range owned {
		p := obj.(*unstructured.Unstructured)
		byName[p.GetName()] = p
		names = append(names, p.GetName())
	}
	leaving := Leaving(f, names)
	idx := make([]int, len(leaving))
	for i := range idx {
		idx[i] = i
	}
	return c.forEach(ctx, idx, func(ctx context.Context, i int) error {
		return c.remove(ctx, f, byName[leaving[i]])
	})
}

// remove lets one member go: Retain releases it, Delete deletes it.
func (c *Controller) remove(ctx context.Context, f *Fleet, p *unstructured.Unstructured) error {
	if p.GetName() == planes.Root {
		return nil
	}
	if f.Spec.DeletionPolicy == Delete {
		if p.GetDeletionTimestamp() != nil {
			return nil
		}
		uid := p.GetUID()
		err := c.planes.Delete(ctx, p.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting plane %s: %w", p.GetName(), err)
		}
		return nil
	}
	return c.patchPlane(ctx, p.GetName(), map[string]any{"metadata": map[string]any{
		"labels": map[string]any{Label: nil}, "annotations": releaseSettings()}})
}

func (c *Controller) patchPlane(ctx context.Context, name string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.planes.Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("updating plane %s: %w", name, err)
	}
	return nil
}

// writeStatus writes st unless it is what f already says. Progress alone
// waits out progressInterval since the last write; the returned duration
// says when to come back for it.
func (c *Controller) writeStatus(ctx context.Context, f *Fleet, s *fleetState, st Status, now time.Time) (time.Duration, error) {
	st, data, err := compact(st, statusBudget(f))
	if err != nil {
		return 0, err
	}
	if equality.Semantic.DeepEqual(st, f.Status) {
		return 0, nil
	}
	if !significant(f.Status, st) {
		if wait := progressInterval(len(st.Members)) - now.Sub(s.lastStatusWrite); wait > 0 {
			return wait, nil
		}
	}
	// One JSON patch replaces the whole status: fields it no longer has
	// go away, which a merge patch would keep.
	patch := append(append([]byte(`[{"op":"add","path":"/status","value":`), data...), "}]"...)
	if _, err := c.fleets.Patch(ctx, f.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("writing status of Fleet %s: %w", f.Name, err)
	}
	s.lastStatusWrite = now
	return 0, nil
}

// expire deletes a Fleet whose time after first being ready is up.
func (c *Controller) expire(ctx context.Context, f *Fleet, st Status, now time.Time) (time.Duration, error) {
	if f.Spec.TTLSecondsAfterReady == nil || st.FirstReadyTime == nil {
		return 0, nil
	}
	expiry := st.FirstReadyTime.Add(time.Duration(*f.Spec.TTLSecondsAfterReady) * time.Second)
	if now.Before(expiry) {
		return expiry.Sub(now), nil
	}
	uid := f.UID
	err := c.fleets.Delete(ctx, f.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return 0, fmt.Errorf("deleting expired Fleet %s: %w", f.Name, err)
	}
	return 0, nil
}

// finalize lets every member of a deleted Fleet go, then releases the
// Fleet.
func (c *Controller) finalize(ctx context.Context, f *Fleet) (time.Duration, error) {
	if !hasFinalizer(f) {
		return 0, nil
	}
	owned, err := c.config.Planes.GetIndexer().ByIndex(byFleet, f.Name)
	if err != nil {
		return 0, err
	}
	if len(owned) == 0 {
		// The informer may lag behind a create: only the API's word lets
		// the Fleet go.
		list, err := c.planes.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{Label: f.Name}.String()})
		if err != nil {
			return 0, fmt.Errorf("listing members of Fleet %s: %w", f.Name, err)
		}
		for i := range list.Items {
			owned = append(owned, &list.Items[i])
		}
	}
	var members []*unstructured.Unstructured
	for _, obj := range owned {
		if p := obj.(*unstructured.Unstructured); p.GetName() != planes.Root {
			members = append(members, p)
		}
	}
	if len(members) == 0 {
		c.mu.Lock()
		busy := c.state[f.Name] != nil && len(c.state[f.Name].provisioning) > 0
		c.mu.Unlock()
		if busy {
			// A member being created would outlive the Fleet.
			return 100 * time.Millisecond, nil
		}
		var kept []string
		for _, fin := range f.Finalizers {
			if fin != Finalizer {
				kept = append(kept, fin)
			}
		}
		return 0, c.setFinalizers(ctx, f, kept)
	}
	idx := make([]int, len(members))
	for i := range idx {
		idx[i] = i
	}
	if err := c.forEach(ctx, idx, func(ctx context.Context, i int) error {
		return c.remove(ctx, f, members[i])
	}); err != nil {
		return 0, err
	}
	c.mu.Lock()
	s := c.fleetState(f.Name)
	c.mu.Unlock()
	now := time.Now()
	if _, err := c.writeStatus(ctx, f, s, deletingStatus(f, len(members), metav1.NewTime(now).Rfc3339Copy()), now); err != nil {
		return 0, err
	}
	// Plane events bring the Fleet back as members go; this is a floor.
	return 5 * time.Second, nil
}

func hasFinalizer(f *Fleet) bool {
	for _, fin := range f.Finalizers {
		if fin == Finalizer {
			return true
		}
	}
	return false
}

func (c *Controller) setFinalizers(ctx context.Context, f *Fleet, finalizers []string) error {
	if finalizers == nil {
		finalizers = []string{}
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": finalizers, "resourceVersion": f.ResourceVersion}})
	if err != nil {
		return err
	}
	_, err = c.fleets.Patch(ctx, f.Name, types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("setting finalizers of Fleet %s: %w", f.Name, err)
	}
	return nil
}

func (c *Controller) fleetExists(name string) bool {
	_, ok, _ := c.fleetInformer.GetStore().GetByKey(name)
	return ok
}

// forEach runs fn for every index with at most Parallelism calls in
// flight and returns the first error.
func (c *Controller) forEach(ctx context.Context, idx []int, fn func(context.Context, int) error) error {
	if len(idx) == 0 {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.config.Parallelism)
	for _, i := range idx {
		g.Go(func() error { return fn(gctx, i) })
	}
	return g.Wait()
}

// bootstrap sends the new member its first request, as its first user
// would: the plane lifecycle admits it like any request and bootstraps the
// plane within it. Creates thus bootstrap with the controller's
// parallelism instead of waiting for the lifecycle's few workers, and a
// plane deleted meanwhile is never written to after its wipe (the request
// is tracked like any other). A failure only leaves the bootstrap to the
// lifecycle.
func (c *Controller) bootstrap(ctx context.Context, plane string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.probeTo+planes.Path(plane)+"/api/v1/namespaces/default", nil)
	if err != nil {
		return
	}
	resp, err := c.probe.Do(req)
	if err != nil {
		logrus.WithError(err).WithField("plane", plane).Debug("first request to a new Fleet member")
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// probeReadyz asks the plane's own /readyz.
func (c *Controller) probeReadyz(ctx context.Context, plane string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.probeTo+planes.Path(plane)+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := c.probe.Do(req)
	if err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "ok" {
		return nil
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return fmt.Errorf("readyz answered %d: %s", resp.StatusCode, line)
}
