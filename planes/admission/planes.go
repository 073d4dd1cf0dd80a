package admission

import (
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"kplane.dev/kplane/planes"
)

// PlanesPluginName guards the Plane objects of the root plane.
const PlanesPluginName = "kplane.dev/Planes"

// planesResource is kplane.dev/planes.
var planesResource = schema.GroupResource{Group: "kplane.dev", Resource: "planes"}

// PlaneCounter tells how many planes exist.
type PlaneCounter interface {
	Count() int
}

// LatePlaneCounter lets the plugin exist before the lifecycle manager.
type LatePlaneCounter struct{ PlaneCounter }

// Count implements PlaneCounter; 0 until bound.
func (l *LatePlaneCounter) Count() int {
	if l.PlaneCounter == nil {
		return 0
	}
	return l.PlaneCounter.Count()
}

// Planes validates and completes Plane objects in the root plane: the name
// must be a plane id, every Plane carries the cleanup finalizer, the count
// stays under --max-planes, and the root plane cannot be deleted.
type Planes struct {
	*admission.Handler
	finalizer string
	maxPlanes int
	counter   PlaneCounter
}

var _ admission.MutationInterface = &Planes{}
var _ admission.ValidationInterface = &Planes{}

// NewPlanes returns the plugin. maxPlanes 0 means no limit.
func NewPlanes(finalizer string, maxPlanes int, counter PlaneCounter) *Planes {
	return &Planes{Handler: admission.NewHandler(admission.Create, admission.Delete),
		finalizer: finalizer, maxPlanes: maxPlanes, counter: counter}
}

// Factory returns an admission.Factory that always yields p.
func (p *Planes) Factory() admission.Factory {
	return func(io.Reader) (admission.Interface, error) { return p, nil }
}

func (p *Planes) applies(ctx context.Context, a admission.Attributes) bool {
	plane, _ := planes.FromContext(ctx)
	return plane == planes.Root && a.GetResource().GroupResource() == planesResource && a.GetSubresource() == ""
}

// Admit adds the cleanup finalizer to new Planes.
func (p *Planes) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !p.applies(ctx, a) || a.GetOperation() != admission.Create {
		return nil
	}
	accessor, err := meta.Accessor(a.GetObject())
	if err != nil {
		return err
	}
	for _, f := range accessor.GetFinalizers() {
		if f == p.finalizer {
			return nil
		}
	}
	accessor.SetFinalizers(append(accessor.GetFinalizers(), p.finalizer))
	return nil
}

// Validate checks names, the plane limit and root's protection.
func (p *Planes) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !p.applies(ctx, a) {
		return nil
	}
	switch a.GetOperation() {
	case admission.Delete:
		if a.GetName() == planes.Root {
			return apierrors.NewForbidden(planesResource, a.GetName(), fmt.Errorf("the root plane cannot be deleted"))
		}
	case admission.Create:
		if err := planes.ValidateID(a.GetName()); err != nil {
			return apierrors.NewInvalid(schema.GroupKind{Group: planesResource.Group, Kind: "Plane"}, a.GetName(),
				field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), a.GetName(), err.Error())})
		}
		if p.maxPlanes > 0 && a.GetName() != planes.Root && p.counter.Count() >= p.maxPlanes {
			return apierrors.NewForbidden(planesResource, a.GetName(), fmt.Errorf(
				"plane limit reached: %d planes exist and the server allows %d (--max-planes); delete planes or raise the limit",
				p.counter.Count(), p.maxPlanes))
		}
	}
	return nil
}
