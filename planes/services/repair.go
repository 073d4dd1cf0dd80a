package services

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/service/allocator"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"
	"k8s.io/kubernetes/pkg/registry/core/service/portallocator"

	"kplane.dev/kplane/planes"
)

// LeakSightings is how many passes in a row must find an address held by a
// plane's record and by none of its Services before the repair frees it:
// kube-apiserver's repair controllers wait for three as well. A Service
// create allocates before admission and stores after it, so one pass can
// see an address whose Service is still on its way.
const LeakSightings = 3

// Repair keeps every plane's allocation records true to its Services, as
// kube-apiserver's ClusterIP and NodePort repair controllers do for one
// cluster: an address a record holds and no Service does (its server died
// between allocating it and storing the Service, or before releasing it
// after a delete) is freed once LeakSightings passes in a row have seen
// it; an address a Service holds and its record lacks is taken again at
// once, so no other Service of the plane can be given it. One Repair
// serves every plane, one pass at a time; a plane costs something only
// while it has a record of its own.
type Repair struct {
	rest     *REST
	interval time.Duration
	// leaks counts the passes in a row that saw each leaked item. Only
	// this Repair's passes touch it, one at a time.
	leaks map[leakedItem]int
}

// leakedItem is one item of one record of one plane.
type leakedItem struct {
	plane, record string
	offset        int
}

// NewRepair returns the repair of r's records, a pass every interval.
func (r *REST) NewRepair(interval time.Duration) *Repair {
	return &Repair{rest: r, interval: interval, leaks: map[leakedItem]int{}}
}

// Run repairs every interval, the first an interval after it starts (not
// on top of a start's own work), until ctx is done. Only one server of a
// datastore should run it (the plane lifecycle's holder): two would count
// sightings apart, which is harmless but twice the reads.
func (p *Repair) Run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(p.interval):
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := p.Pass(ctx); err != nil && ctx.Err() == nil {
			logrus.WithError(err).Warn("repairing service address allocations")
		}
	}, p.interval)
}

// Pass checks the records of every plane that has its own once.
func (p *Repair) Pass(ctx context.Context) error {
	owners, err := p.rest.recordOwners(ctx)
	if err != nil {
		return err
	}
	began := time.Now()
	defer func() {
		logrus.WithFields(logrus.Fields{"planes": len(owners), "took": time.Since(began).Round(time.Millisecond).String()}).
			Debug("service address repair pass")
	}()
	seen := map[leakedItem]int{}
	for _, plane := range owners {
		if err := p.repairPlane(ctx, plane, seen); err != nil && ctx.Err() == nil {
			// A plane being deleted or reset, or a template in use: the
			// next pass looks again.
			logrus.WithError(err).WithField("plane", plane).Debug("service address repair skipped the plane")
		}
	}
	p.leaks = seen
	return ctx.Err()
}

// repairPlane checks both records of plane against its Services (the
// plane's view: a member's include its template's). The records are read
// before the Services are listed and written back only if unchanged since
// (a compare-and-swap on their revision), so an address allocated or
// released in between is never mistaken for a leak or a loss in the
// write: that pass only counts sightings.
func (p *Repair) repairPlane(ctx context.Context, plane string, seen map[leakedItem]int) error {
	pctx := planes.WithPlane(ctx, plane)
	ips, ports, err := p.rest.recordsOf(plane)
	if err != nil {
		return err
	}
	checks := []recordCheck{{a: ips, held: p.rest.clusterIPsHeld}, {a: ports, held: p.rest.nodePortsHeld}}
	for i := range checks {
		if err := checks[i].readRecord(pctx); err != nil {
			return err
		}
	}
	svcs, err := p.rest.planeServices(pctx)
	if err != nil {
		return err
	}
	for i := range checks {
		if err := p.repairRecord(pctx, &checks[i], svcs, seen); err != nil {
			return fmt.Errorf("repairing %s of plane %s: %w", checks[i].a.name, plane, err)
		}
	}
	return nil
}

// recordCheck is one record of a plane being checked: its allocator, what
// Services make of it, and the record as read (nil: none of this range).
type recordCheck struct {
	a    *recordAllocator
	held func([]api.Service) (*api.RangeAllocation, error)
	rec  *api.RangeAllocation
}

func (c *recordCheck) readRecord(ctx context.Context) error {
	rec := &api.RangeAllocation{}
	err := c.a.records.store.Get(ctx, c.a.records.key(c.a.name), storage.GetOptions{}, rec)
	switch {
	case storage.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case rec.Range != c.a.rangeSpec:
		// Of another range (the server's changed): the next allocation
		// seeds it afresh.
		return nil
	}
	c.rec = rec
	return nil
}

// errRecordChanged ends a repair whose record changed after it was read:
// an allocation or release in between makes the comparison stale.
var errRecordChanged = errors.New("the record changed while it was compared")

// repairRecord compares one record, as read, with what svcs hold.
func (p *Repair) repairRecord(ctx context.Context, c *recordCheck, svcs []api.Service, seen map[leakedItem]int) error {
	if c.rec == nil {
		return nil
	}
	want, err := c.held(svcs)
	if err != nil {
		return err
	}
	stored, err := c.a.load(ctx, c.rec)
	if err != nil {
		return err
	}
	inUse, err := c.a.load(ctx, want)
	if err != nil {
		return err
	}
	free, missing := p.compare(c.a, stored, inUse, seen)
	if len(free) == 0 && len(missing) == 0 {
		return nil
	}
	if err := c.a.rewrite(ctx, c.rec.ResourceVersion, free, missing); err != nil {
		return err
	}
	logrus.WithFields(logrus.Fields{"plane": c.a.plane, "record": c.a.name, "freed": len(free), "retaken": len(missing)}).
		Info("repaired service address allocations")
	return nil
}

// compare returns the items to free (leaked in LeakSightings passes in a
// row, this one included) and the items to take again (held by a Service,
// free in the record), and counts this pass's sightings into seen.
func (p *Repair) compare(a *recordAllocator, stored, inUse *allocator.AllocationBitmap, seen map[leakedItem]int) (free, missing []int) {
	stored.ForEach(func(offset int) {
		if inUse.Has(offset) {
			return
		}
		item := leakedItem{plane: a.plane, record: a.name, offset: offset}
		seen[item] = p.leaks[item] + 1
		if seen[item] >= LeakSightings {
			free = append(free, offset)
			delete(seen, item)
		}
	})
	inUse.ForEach(func(offset int) {
		if !stored.Has(offset) {
			missing = append(missing, offset)
		}
	})
	sort.Ints(free)
	sort.Ints(missing)
	return free, missing
}

// rewrite frees and takes items of a's record if it is still at
// resourceVersion.
func (a *recordAllocator) rewrite(ctx context.Context, resourceVersion string, free, take []int) error {
	unchanged := func(rec *api.RangeAllocation) error {
		if rec.ResourceVersion != resourceVersion {
			return errRecordChanged
		}
		return nil
	}
	return a.swap(ctx, false, unchanged, func(bitmap *allocator.AllocationBitmap) error {
		for _, offset := range free {
			if err := bitmap.Release(offset); err != nil {
				return err
			}
		}
		for _, offset := range take {
			if _, err := bitmap.Allocate(offset); err != nil {
				return err
			}
		}
		return nil
	})
}

// recordsOf returns the allocators of plane's two records, with the
// ranges and offsets its registry gives them.
func (r *REST) recordsOf(plane string) (ips, ports *recordAllocator, err error) {
	capture := func(name string, seed seedFunc, into **recordAllocator) allocator.AllocatorWithOffsetFactory {
		factory := r.recordFactory(plane, name, seed)
		return func(max int, rangeSpec string, offset int) (allocator.Interface, error) {
			a, err := factory(max, rangeSpec, offset)
			*into, _ = a.(*recordAllocator)
			return a, err
		}
	}
	if _, err := ipallocator.New(&r.config.ClusterIPRange, capture(clusterIPsRecord, r.seedClusterIPs, &ips)); err != nil {
		return nil, nil, fmt.Errorf("service cluster IP range %s: %w", r.config.ClusterIPRange.String(), err)
	}
	if _, err := portallocator.New(r.config.NodePortRange, capture(nodePortsRecord, r.seedNodePorts, &ports)); err != nil {
		return nil, nil, fmt.Errorf("service node port range %s: %w", r.config.NodePortRange.String(), err)
	}
	return ips, ports, nil
}

// recordOwners returns the planes that store allocation records of their
// own, read a page at a time: a cluster IP record of a /16 range is up to
// 8 KiB, so 10,000 planes' records in one list would be 80 MiB at once.
func (r *REST) recordOwners(ctx context.Context) ([]string, error) {
	owners := map[string]bool{}
	pred := storage.Everything
	pred.Limit = recordsPage
	for {
		list := &rangeAllocationList{}
		err := r.records.store.GetList(planes.WithAllPlanes(ctx), r.records.prefix,
			storage.ListOptions{Recursive: true, Predicate: pred}, list)
		if err != nil {
			return nil, fmt.Errorf("listing service address records: %w", err)
		}
		for i := range list.Items {
			if plane := planes.OfObject(&list.Items[i]); plane != "" {
				owners[plane] = true
			}
		}
		if list.Continue == "" {
			break
		}
		pred.Continue = list.Continue
	}
	out := make([]string, 0, len(owners))
	for plane := range owners {
		out = append(out, plane)
	}
	sort.Strings(out)
	return out, nil
}

// recordsPage is how many records one read of recordOwners returns.
const recordsPage = 500
