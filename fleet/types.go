package fleet

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/limits"
)

// GVR is the Fleet resource, in the root plane.
var GVR = schema.GroupVersionResource{Group: "kplane.dev", Version: "v1", Resource: "fleets"}

// Label marks a Plane as a member of the Fleet it names.
const Label = "kplane.dev/fleet"

// Finalizer holds a Fleet until its members are released or deleted.
const Finalizer = "kplane.dev/fleet-members"

// MaxMembers is the largest Fleet (the CRD's bound on replicas and names).
const MaxMembers = 10000

// DeletionPolicy says what happens to planes that leave a Fleet.
type DeletionPolicy string

const (
	// Retain keeps the planes; they lose the Fleet label.
	Retain DeletionPolicy = "Retain"
	// Delete deletes the planes and everything in them.
	Delete DeletionPolicy = "Delete"
)

// MemberPhase is where one member is.
type MemberPhase string

const (
	MemberPending MemberPhase = "Pending"
	MemberReady   MemberPhase = "Ready"
	MemberFailed  MemberPhase = "Failed"
)

// ConditionReady is True when every member is Ready.
const ConditionReady = "Ready"

// Fleet is the kplane.dev/v1 Fleet object.
type Fleet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// Spec is what a Fleet asks for. The CRD schema validates it (exactly one
// of Replicas and Names, names are plane ids, ...).
type Spec struct {
	Replicas             *int32         `json:"replicas,omitempty"`
	NamePrefix           string         `json:"namePrefix,omitempty"`
	Names                []string       `json:"names,omitempty"`
	DeletionPolicy       DeletionPolicy `json:"deletionPolicy,omitempty"`
	TTLSecondsAfterReady *int64         `json:"ttlSecondsAfterReady,omitempty"`
	// Template is the plane every member starts as (Plane.spec.template).
	Template string `json:"template,omitempty"`
	// Simulation, Limits and Audit are every member's Plane.spec fields of
	// the same names; nil leaves the members' own alone.
	Simulation *lifecycle.SimulationSpec `json:"simulation,omitempty"`
	Limits     *limits.Limits            `json:"limits,omitempty"`
	Audit      *lifecycle.AuditSpec      `json:"audit,omitempty"`
}

// Status is what the controller reports.
type Status struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Replicas           int32              `json:"replicas"`
	ReadyReplicas      int32              `json:"readyReplicas"`
	FirstReadyTime     *metav1.Time       `json:"firstReadyTime,omitempty"`
	OmittedMembers     int32              `json:"omittedMembers,omitempty"`
	Members            []Member           `json:"members,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// Member is one member's state. Empty fields are left out: a Fleet of
// thousands of members must fit in one stored object.
type Member struct {
	Name               string       `json:"name"`
	Phase              MemberPhase  `json:"phase"`
	Message            string       `json:"message,omitempty"`
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}
