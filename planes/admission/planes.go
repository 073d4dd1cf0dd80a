package admission

import (
	"sort"
	"strings"
	"time"

	"context"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/limits"
)

// PlanesPluginName guards the Plane objects of the root plane.
const PlanesPluginName = "kplane.dev/Planes"

// planesResource is kplane.dev/planes.
var planesResource = schema.GroupResource{Group: "kplane.dev", Resource: "planes"}

// PlaneCounter tells how many planes exist and how they are stacked.
type PlaneCounter interface {
	Count() int
	// Exists reports whether plane is known (root included).
	Exists(plane string) bool
	// CheckTemplate reports why plane cannot be made from template.
	CheckTemplate(plane, template string) error
	// Dependents returns the planes made from plane.
	Dependents(plane string) []string
	// CheckSource reports why plane cannot be cloned from source.
	CheckSource(plane, source string) error
	// TemplateOf returns the template plane is made from ("" for none).
	TemplateOf(plane string) string
	// BaseOf returns the base plane plane stands on ("" for none).
	BaseOf(plane string) string
	// Base is the base plane new planes made from nothing stand on.
	Base() string
	// WaitForPlanes returns once every stored plane is known (the
	// answers above are about every plane from then on), or with ctx's
	// error.
	WaitForPlanes(ctx context.Context) error
}

// noPlanes is the counter of a server whose plane manager does not exist
// yet: no planes, so no templates and no dependents.
type noPlanes struct{}

func (noPlanes) Count() int { return 0 }

func (noPlanes) Exists(plane string) bool { return plane == planes.Root }
func (noPlanes) CheckTemplate(_, template string) error {
	return fmt.Errorf("plane %s does not exist", template)
}
func (noPlanes) Dependents(string) []string { return nil }
func (noPlanes) CheckSource(_, source string) error {
	return fmt.Errorf("plane %s does not exist", source)
}
func (noPlanes) TemplateOf(string) string { return "" }

func (noPlanes) BaseOf(string) string { return "" }

// Base: until the manager is bound new planes stand on nothing and hold
// copies of the bootstrap.
func (noPlanes) Base() string { return "" }

func (noPlanes) WaitForPlanes(context.Context) error { return nil }

// Planes validates and completes Plane objects in the root plane: the name
// must be a plane id, every Plane carries the cleanup finalizer, the count
// stays under --max-planes, and the root plane cannot be deleted.
type Planes struct {
	*admission.Handler
	finalizer string
	maxPlanes int
	counter   PlaneCounter
	// admitted holds --max-planes across servers once bound.
	admitted *admitted
	// clones checks a clone against its limits once bound.
	clones CloneLimits
}

// CloneLimits tells whether a clone would start over its limits.
type CloneLimits interface {
	CheckClone(clone, source string, spec *limits.Limits) error
}

var _ admission.MutationInterface = &Planes{}
var _ admission.ValidationInterface = &Planes{}

// NewPlanes returns the plugin. maxPlanes 0 means no limit. Admission is
// configured before the APIs the plane manager is built on, so the manager
// is bound with SetPlaneCounter once it exists; until then no plane exists.
func NewPlanes(finalizer string, maxPlanes int) *Planes {
	return &Planes{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete),
		finalizer: finalizer, maxPlanes: maxPlanes, counter: noPlanes{}}
}

// SetPlaneCounter binds the plane manager. It is called once, before the
// server serves.
func (p *Planes) SetPlaneCounter(counter PlaneCounter) {
	p.counter = counter
}

// SetCloneLimits binds the limits' enforcer. It is called once, before
// the server serves.
func (p *Planes) SetCloneLimits(clones CloneLimits) {
	p.clones = clones
}

// SetAdmittedStore binds the root plane's ConfigMaps storage, where the
// record of admitted planes is kept (see AdmittedRecord). It is called
// once, before the server serves; without it --max-planes counts only the
// planes this server knows.
func (p *Planes) SetAdmittedStore(store admittedStore) {
	p.admitted = &admitted{store: store, now: time.Now}
}

// ForgetPlane frees a deleted plane's place under --max-planes.
func (p *Planes) ForgetPlane(plane string) {
	if p.admitted != nil && p.maxPlanes > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.admitted.forget(ctx, plane)
	}
}

// Factory returns an admission.Factory that always yields p.
func (p *Planes) Factory() admission.Factory {
	return func(io.Reader) (admission.Interface, error) { return p, nil }
}

func (p *Planes) applies(ctx context.Context, a admission.Attributes) bool {
	plane, _ := planes.FromContext(ctx)
	return plane == planes.Root && a.GetResource().GroupResource() == planesResource && a.GetSubresource() == ""
}

// waitForPlanes holds a Plane write until every stored plane is known: a
// server is ready before (planes load lazily), and a template's
// dependents, a cycle or the count under --max-planes are only known
// then.
func (p *Planes) waitForPlanes(ctx context.Context) error {
	if err := p.counter.WaitForPlanes(ctx); err != nil {
		return apierrors.NewServiceUnavailable(err.Error())
	}
	return nil
}

// Admit adds the cleanup finalizer to new Planes and gives a clone its
// source's template.
func (p *Planes) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !p.applies(ctx, a) || a.GetOperation() != admission.Create {
		return nil
	}
	if err := p.waitForPlanes(ctx); err != nil {
		return err
	}
	accessor, err := meta.Accessor(a.GetObject())
	if err != nil {
		return err
	}
	if err := p.admitClone(a); err != nil {
		return err
	}
	p.admitBase(a)
	for _, f := range accessor.GetFinalizers() {
		if f == p.finalizer {
			return nil
		}
	}
	accessor.SetFinalizers(append(accessor.GetFinalizers(), p.finalizer))
	return nil
}

// admitClone makes a clone (spec.from) start over its source's template:
// the source's own records are copied, the template's are shared. A clone
// names no template of its own.
func (p *Planes) admitClone(a admission.Attributes) error {
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	source, _, _ := unstructured.NestedString(u.Object, "spec", "from")
	if source == "" {
		return nil
	}
	if template, _, _ := unstructured.NestedString(u.Object, "spec", "template"); template != "" {
		return invalidPlane(a.GetName(), field.Invalid(field.NewPath("spec", "template"), template,
			"a clone is made from its source's template: set spec.from or spec.template, not both"))
	}
	if err := p.counter.CheckSource(a.GetName(), source); err != nil {
		return invalidPlane(a.GetName(), field.Invalid(field.NewPath("spec", "from"), source, err.Error()))
	}
	if p.clones != nil {
		if err := p.clones.CheckClone(a.GetName(), source, limits.OfPlane(u)); err != nil {
			return err
		}
	}
	if template := p.counter.TemplateOf(source); template != "" {
		return unstructured.SetNestedField(u.Object, template, "spec", "template")
	}
	return nil
}

// admitBase puts a plane made from nothing on the server's base plane, so
// that it stores only what it changes: a clone stands on its source's
// base, a member of a template on none of its own. What a client wrote in
// the annotation is replaced.
func (p *Planes) admitBase(a admission.Attributes) {
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok || a.GetName() == planes.Root {
		return
	}
	annotations := u.GetAnnotations()
	delete(annotations, planes.BaseAnnotation)
	base := ""
	template, _, _ := unstructured.NestedString(u.Object, "spec", "template")
	source, _, _ := unstructured.NestedString(u.Object, "spec", "from")
	switch {
	case template != "":
	case source != "":
		base = p.counter.BaseOf(source)
	default:
		base = p.counter.Base()
	}
	if base != "" {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[planes.BaseAnnotation] = base
	}
	u.SetAnnotations(annotations)
}

// validateBase keeps the base annotation as the server set it: a plane's
// objects are layers over that base.
func validateBase(a admission.Attributes) error {
	newObj, ok1 := a.GetObject().(*unstructured.Unstructured)
	oldObj, ok2 := a.GetOldObject().(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return nil
	}
	was, is := oldObj.GetAnnotations()[planes.BaseAnnotation], newObj.GetAnnotations()[planes.BaseAnnotation]
	if was == is {
		return nil
	}
	return invalidPlane(a.GetName(), field.Invalid(field.NewPath("metadata", "annotations").Key(planes.BaseAnnotation), is,
		"set by the server when the Plane is created; it cannot change"))
}

func invalidPlane(name string, errs ...*field.Error) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: planesResource.Group, Kind: "Plane"}, name, errs)
}

// Validate checks names, the plane limit and root's protection.
func (p *Planes) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !p.applies(ctx, a) {
		return nil
	}
	if err := p.waitForPlanes(ctx); err != nil {
		return err
	}
	switch a.GetOperation() {
	case admission.Update:
		return validateBase(a)
	case admission.Delete:
		if a.GetName() == planes.Root {
			return apierrors.NewForbidden(planesResource, a.GetName(), fmt.Errorf("the root plane cannot be deleted"))
		}
		if deps := p.counter.Dependents(a.GetName()); len(deps) > 0 {
			sort.Strings(deps)
			return apierrors.NewConflict(planesResource, a.GetName(), fmt.Errorf(
				"the plane is the template of %s; delete them first", strings.Join(deps, ", ")))
		}
	case admission.Create:
		if err := planes.ValidateID(a.GetName()); err != nil {
			return invalidPlane(a.GetName(), field.Invalid(field.NewPath("metadata", "name"), a.GetName(), err.Error()))
		}
		if err := p.validateTemplate(a); err != nil {
			return err
		}
		return p.admitCount(ctx, a.GetName())
	}
	return nil
}

// admitCount holds --max-planes: through the record of admitted planes
// when it is bound (servers sharing a datastore), else against the planes
// this server knows.
func (p *Planes) admitCount(ctx context.Context, plane string) error {
	if p.maxPlanes <= 0 || plane == planes.Root {
		return nil
	}
	if p.admitted != nil {
		return p.admitted.admit(ctx, plane, p.maxPlanes, p.counter)
	}
	if n := p.counter.Count(); n >= p.maxPlanes {
		return apierrors.NewForbidden(planesResource, plane, fmt.Errorf(
			"plane limit reached: %d planes exist and the server allows %d (--max-planes); delete planes or raise the limit", n, p.maxPlanes))
	}
	return nil
}

// validateTemplate refuses a Plane whose spec.template cannot be used: a
// missing or deleting plane, root, itself.
func (p *Planes) validateTemplate(a admission.Attributes) error {
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	template, _, _ := unstructured.NestedString(u.Object, "spec", "template")
	if template == "" {
		return nil
	}
	if err := p.counter.CheckTemplate(a.GetName(), template); err != nil {
		return invalidPlane(a.GetName(), field.Invalid(field.NewPath("spec", "template"), template, err.Error()))
	}
	return nil
}
