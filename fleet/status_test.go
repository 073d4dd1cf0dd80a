package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusOf builds the status a reconcile writes for f with every member
// in phase, carrying message.
func statusOf(f *Fleet, phase MemberPhase, message string, pending ...int) Status {
	names := MemberNames(f)
	members := make([]observed, len(names))
	for i, n := range names {
		members[i] = observed{name: n, phase: phase, message: message}
	}
	for _, i := range pending {
		members[i].phase = MemberPending
	}
	return buildStatus(f, members, metav1.NewTime(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)))
}

// TestStatusOfTenThousandMembers: the largest Fleet reports every member,
// with its transition time, within the datastore's object size limit.
func TestStatusOfTenThousandMembers(t *testing.T) {
	f := replicasFleet("rl", "", MaxMembers)
	st, data, err := compact(statusOf(f, MemberReady, ""), statusBudget(f))
	if err != nil {
		t.Fatal(err)
	}
	if st.OmittedMembers != 0 || len(st.Members) != MaxMembers || st.Members[0].LastTransitionTime == nil {
		t.Fatalf("compacted a status that fits: %d members listed, %d omitted", len(st.Members), st.OmittedMembers)
	}
	if len(data) > ObjectSizeLimit-objectReserve {
		t.Fatalf("status of %d members takes %d bytes, over the budget", MaxMembers, len(data))
	}
	t.Logf("status of %d Ready members: %d bytes (%.1f per member), limit %d", MaxMembers, len(data),
		float64(len(data))/MaxMembers, ObjectSizeLimit)
}

// TestStatusCompaction: a status that would not fit drops messages, then
// transition times, then lists the members that are not Ready first and
// counts the rest.
func TestStatusCompaction(t *testing.T) {
	f := replicasFleet("rl", "", MaxMembers)
	st, data, err := compact(statusOf(f, MemberFailed, strings.Repeat("x", 200)), statusBudget(f))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > statusBudget(f) || st.OmittedMembers != 0 || st.Members[0].Message != "" {
		t.Fatalf("messages: %d bytes, %d omitted, message %q", len(data), st.OmittedMembers, st.Members[0].Message)
	}
	if c := st.Conditions[0]; !strings.Contains(c.Message, "first failure: rl-0000: xxx") {
		t.Errorf("the Ready condition no longer names the first failure: %s", c.Message)
	}

	// 10,000 members named by 63-character plane ids: the spec alone takes
	// 650 KB, so members must be left out.
	names := make([]string, MaxMembers)
	for i := range names {
		names[i] = fmt.Sprintf("%s%05d", strings.Repeat("p", 58), i)
	}
	f = &Fleet{Spec: Spec{Names: names}}
	f.Name = "wide"
	full := statusOf(f, MemberReady, "", 7)
	budget := statusBudget(f)
	st, data, err = compact(full, budget)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > budget {
		t.Fatalf("compacted status takes %d bytes, budget %d", len(data), budget)
	}
	if st.OmittedMembers == 0 || int(st.OmittedMembers)+len(st.Members) != MaxMembers {
		t.Fatalf("%d listed + %d omitted, want %d", len(st.Members), st.OmittedMembers, MaxMembers)
	}
	if st.Members[0].Name != names[7] || st.Members[0].Phase != MemberPending {
		t.Errorf("the member that is not Ready is not listed first: %+v", st.Members[0])
	}
	if st.ReadyReplicas != MaxMembers-1 || st.Replicas != MaxMembers {
		t.Errorf("counts changed by compaction: %d/%d", st.ReadyReplicas, st.Replicas)
	}
	t.Logf("%d members with 63-character names: %d listed, %d omitted, status %d bytes", MaxMembers,
		len(st.Members), st.OmittedMembers, len(data))
}
