package fleet

import (
	"reflect"
	"testing"
)

func replicasFleet(name, prefix string, n int32) *Fleet {
	f := &Fleet{Spec: Spec{Replicas: &n, NamePrefix: prefix}}
	f.Name = name
	return f
}

func TestMemberNames(t *testing.T) {
	if got := MemberNames(replicasFleet("rl", "", 3)); !reflect.DeepEqual(got, []string{"rl-0000", "rl-0001", "rl-0002"}) {
		t.Errorf("default prefix: %v", got)
	}
	if got := MemberNames(replicasFleet("rl", "env-", 2)); !reflect.DeepEqual(got, []string{"env-0000", "env-0001"}) {
		t.Errorf("namePrefix: %v", got)
	}
	if got := MemberNames(replicasFleet("rl", "", MaxMembers)); got[len(got)-1] != "rl-9999" {
		t.Errorf("the last of %d members is %s, want a four-digit index", MaxMembers, got[len(got)-1])
	}
	f := &Fleet{Spec: Spec{Names: []string{"b", "a"}}}
	if got := MemberNames(f); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Errorf("names: %v", got)
	}
}

func TestLeavingHighestIndexFirst(t *testing.T) {
	f := replicasFleet("rl", "", 2)
	owned := []string{"rl-0003", "rl-0000", "rl-0010", "rl-0001", "adopted", "rl-0002"}
	want := []string{"rl-0010", "rl-0003", "rl-0002", "adopted"}
	if got := Leaving(f, owned); !reflect.DeepEqual(got, want) {
		t.Errorf("Leaving = %v, want %v", got, want)
	}
	if got := Leaving(f, []string{"rl-0000", "rl-0001"}); len(got) != 0 {
		t.Errorf("nothing leaves a Fleet that keeps its members: %v", got)
	}
}

func TestIsMember(t *testing.T) {
	f := replicasFleet("rl", "", 20)
	for plane, want := range map[string]bool{"rl-0000": true, "rl-0019": true, "rl-0020": false, "rl-19": false,
		"rl-00019": false, "rl-abcd": false, "other-0001": false} {
		if got := IsMember(f, plane); got != want {
			t.Errorf("IsMember(%s) = %v, want %v", plane, got, want)
		}
	}
	names := &Fleet{Spec: Spec{Names: []string{"a", "b"}}}
	if !IsMember(names, "b") || IsMember(names, "c") {
		t.Error("IsMember of spec.names")
	}
}
