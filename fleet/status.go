package fleet

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ObjectSizeLimit is the largest object the datastore stores: etcd's
// default request limit, which kine applies too.
const ObjectSizeLimit = 1536 * 1024

// objectReserve is left free in every Fleet for what the server adds
// around spec and status (managed fields, annotations).
const objectReserve = 32 * 1024

// observed is what one reconcile found for one member.
type observed struct {
	name    string
	phase   MemberPhase
	message string
}

// buildStatus turns the members' states into a Fleet status. A member
// keeps its lastTransitionTime while its phase does not change.
func buildStatus(f *Fleet, members []observed, now metav1.Time) Status {
	previous := make(map[string]Member, len(f.Status.Members))
	for _, m := range f.Status.Members {
		previous[m.Name] = m
	}
	st := Status{
		ObservedGeneration: f.Generation,
		Replicas:           int32(len(members)),
		FirstReadyTime:     f.Status.FirstReadyTime,
		Members:            make([]Member, len(members)),
	}
	var failed int32
	var firstFailure *observed
	for i, m := range members {
		at := &now
		if p, ok := previous[m.name]; ok && p.Phase == m.phase && p.LastTransitionTime != nil {
			at = p.LastTransitionTime
		}
		st.Members[i] = Member{Name: m.name, Phase: m.phase, Message: m.message, LastTransitionTime: at}
		switch m.phase {
		case MemberReady:
			st.ReadyReplicas++
		case MemberFailed:
			failed++
			if firstFailure == nil {
				firstFailure = &members[i]
			}
		}
	}
	cond := metav1.Condition{Type: ConditionReady, ObservedGeneration: f.Generation}
	switch {
	case st.ReadyReplicas == st.Replicas:
		cond.Status, cond.Reason = metav1.ConditionTrue, "AllMembersReady"
		cond.Message = fmt.Sprintf("%d/%d members ready", st.ReadyReplicas, st.Replicas)
		if st.FirstReadyTime == nil {
			st.FirstReadyTime = &now
		}
	case failed > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, "MembersFailed"
		cond.Message = fmt.Sprintf("%d/%d members ready, %d failed; first failure: %s: %s",
			st.ReadyReplicas, st.Replicas, failed, firstFailure.name, firstFailure.message)
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, "MembersPending"
		cond.Message = fmt.Sprintf("%d/%d members ready", st.ReadyReplicas, st.Replicas)
	}
	st.Conditions = setCondition(f.Status.Conditions, cond, now)
	return st
}

// deletingStatus is the status of a Fleet whose members are being
// released or deleted.
func deletingStatus(f *Fleet, remaining int, now metav1.Time) Status {
	st := f.Status
	st.Conditions = setCondition(f.Status.Conditions, metav1.Condition{
		Type: ConditionReady, Status: metav1.ConditionFalse, Reason: "Deleting", ObservedGeneration: f.Generation,
		Message: fmt.Sprintf("the Fleet is being deleted; %d member planes remain (deletionPolicy %s)",
			remaining, f.Spec.DeletionPolicy),
	}, now)
	return st
}

// setCondition returns a copy of conditions with c set (the informer's
// Fleet is not changed); its lastTransitionTime moves to now only when
// its status does.
func setCondition(conditions []metav1.Condition, c metav1.Condition, now metav1.Time) []metav1.Condition {
	out := slices.Clone(conditions)
	c.LastTransitionTime = now
	meta.SetStatusCondition(&out, c)
	return out
}

// compact returns st, with detail of its members dropped step by step
// until its JSON encoding takes at most budget bytes, and that encoding:
// first member messages (the Ready condition still names the first
// failure), then member transition times, and last the members that do
// not fit, Ready ones first (status.omittedMembers counts them).
func compact(st Status, budget int) (Status, []byte, error) {
	data, err := json.Marshal(st)
	if err != nil || len(data) <= budget {
		return st, data, err
	}
	members := make([]Member, len(st.Members))
	copy(members, st.Members)
	st.Members = members
	for i := range st.Members {
		st.Members[i].Message = ""
	}
	if data, err = json.Marshal(st); err != nil || len(data) <= budget {
		return st, data, err
	}
	for i := range st.Members {
		st.Members[i].LastTransitionTime = nil
	}
	if data, err = json.Marshal(st); err != nil || len(data) <= budget {
		return st, data, err
	}
	// Not-ready members first: they are what a reader looks for.
	ordered := make([]Member, 0, len(st.Members))
	for _, m := range st.Members {
		if m.Phase != MemberReady {
			ordered = append(ordered, m)
		}
	}
	for _, m := range st.Members {
		if m.Phase == MemberReady {
			ordered = append(ordered, m)
		}
	}
	// Everything but the member list, then members while they fit.
	st.Members = nil
	st.OmittedMembers = int32(len(ordered))
	base, err := json.Marshal(st)
	if err != nil {
		return st, nil, err
	}
	size := len(base) + len(`,"members":[]`) + 4 // omittedMembers may shrink by a digit or two, never grow
	keep := 0
	for _, m := range ordered {
		entry, err := json.Marshal(m)
		if err != nil {
			return st, nil, err
		}
		if size+len(entry)+1 > budget {
			break
		}
		size += len(entry) + 1
		keep++
	}
	st.Members = ordered[:keep]
	st.OmittedMembers = int32(len(ordered) - keep)
	data, err = json.Marshal(st)
	return st, data, err
}

// statusBudget is the room the status of f has: the object limit less
// everything else the object holds.
func statusBudget(f *Fleet) int {
	rest := *f
	rest.Status = Status{}
	rest.ManagedFields = nil
	data, err := json.Marshal(rest)
	if err != nil {
		return ObjectSizeLimit / 2
	}
	return ObjectSizeLimit - objectReserve - len(data)
}

// progressInterval is how long a Fleet of n members waits between two
// status writes that only report progress: every write of a large status
// is kept by the watch cache for its event window.
func progressInterval(n int) time.Duration {
	d := time.Duration(n) * time.Millisecond
	return min(max(d, 250*time.Millisecond), 10*time.Second)
}

// significant reports whether next says something a reader must learn at
// once, rather than progress that may wait for the next write.
func significant(prev, next Status) bool {
	if prev.ObservedGeneration != next.ObservedGeneration || prev.Replicas != next.Replicas ||
		!equality.Semantic.DeepEqual(prev.FirstReadyTime, next.FirstReadyTime) {
		return true
	}
	p, n := meta.FindStatusCondition(prev.Conditions, ConditionReady), meta.FindStatusCondition(next.Conditions, ConditionReady)
	if p == nil || n == nil {
		return p != n
	}
	return p.Status != n.Status || p.Reason != n.Reason
}
