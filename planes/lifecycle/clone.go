package lifecycle

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"kplane.dev/kplane/planes"
)

// Source implements the Planes admission's view: the plane plane was
// cloned from (spec.from), if any.
func (m *Manager) Source(plane string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.state[plane]
	if s == nil || s.from == "" {
		return "", false
	}
	return s.from, true
}

// TemplateOf returns the template plane is made from ("" for none): a
// clone of plane is made from the same template.
func (m *Manager) TemplateOf(plane string) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if s := m.state[plane]; s != nil {
		return s.template
	}
	return ""
}

// BaseOf returns the base plane plane stands on ("" for none): a clone of
// plane stands on the same base.
func (m *Manager) BaseOf(plane string) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if s := m.state[plane]; s != nil {
		return s.base
	}
	return ""
}

// Base is the base plane the planes made from nothing from now on stand
// on ("" when each writes its own copy of the bootstrap).
func (m *Manager) Base() string {
	if m.config.CopyBootstrap {
		return ""
	}
	return m.config.Bootstrapper.BaseID()
}

// CheckSource reports why plane cannot be cloned from source: the source
// must be a live plane other than root and plane itself.
func (m *Manager) CheckSource(plane, source string) error {
	switch source {
	case plane:
		return fmt.Errorf("a plane cannot be cloned from itself")
	case planes.Root:
		return fmt.Errorf("the root plane cannot be cloned: it holds the server's Planes and Fleets")
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.state[source]
	switch {
	case s == nil:
		return fmt.Errorf("plane %s does not exist", source)
	case s.terminating:
		return fmt.Errorf("plane %s is being deleted", source)
	}
	return nil
}

// clone gives plane the state its source has now: the source's own
// records, read at one datastore revision, become plane's own records over
// the same templates (admission made the clone's template its source's).
// It marks the plane Ready before it returns, so that no request is served
// by a clone a restart would copy again.
func (m *Manager) clone(ctx context.Context, plane, source string) error {
	ch := m.clones.DoChan(plane, func() (any, error) {
		m.mu.RLock()
		done := m.state[plane] != nil && m.state[plane].cloned
		m.mu.RUnlock()
		if done {
			return nil, nil
		}
		// Shared by every request waiting on it: a fresh context, so that a
		// client giving up does not cancel the others' clone.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		return nil, m.copyPlane(cctx, plane, source)
	})
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Manager) copyPlane(ctx context.Context, plane, source string) error {
	if err := m.sourceReady(source); err != nil {
		return err
	}
	began := time.Now()
	// A clone the server stopped in has copied part of its source: start
	// over from nothing.
	if _, err := m.wipe(ctx, plane); err != nil {
		return fmt.Errorf("clearing plane %s before its clone: %w", plane, err)
	}
	if m.config.CustomResources != nil {
		if err := m.config.CustomResources.EnsureStorages(ctx, source); err != nil {
			return err
		}
	}
	rev, err := m.currentRevision(ctx)
	if err != nil {
		return err
	}
	copied, err := m.copyStores(ctx, plane, source, rev)
	if err != nil {
		return fmt.Errorf("cloning plane %s from %s: %w", plane, source, err)
	}
	m.mu.Lock()
	if s := m.state[plane]; s != nil {
		s.cloned = true
	}
	m.mu.Unlock()
	m.setPhase(plane, Ready)
	if err := m.writeStatus(ctx, plane, readyStatus(m.config.Counts.Plane(plane))); err != nil {
		return err
	}
	logrus.WithFields(logrus.Fields{"plane": plane, "from": source, "revision": rev, "records": copied,
		"took": time.Since(began).Round(time.Microsecond).String()}).Info("plane cloned")
	return nil
}

// sourceReady refuses a clone of a plane that is not serving a whole
// state: not ready yet, being deleted, or half-way through a reset.
func (m *Manager) sourceReady(source string) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.state[source]
	switch {
	case s == nil:
		return notFound(source)
	case s.terminating:
		return terminating(source)
	case s.phase != Ready || s.resetting:
		return apierrors.NewServiceUnavailable(fmt.Sprintf("plane %s is not ready to be cloned", source))
	}
	return nil
}

func (m *Manager) copyStores(ctx context.Context, plane, source string, rev uint64) (int, error) {
	var total atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(wipeParallelism)
	for _, s := range m.config.Storage.Stores() {
		if !s.Owns(source) {
			continue
		}
		g.Go(func() error {
			n, err := s.CopyLayer(gctx, source, plane, rev)
			total.Add(int64(n))
			return err
		})
	}
	err := g.Wait()
	return int(total.Load()), err
}
