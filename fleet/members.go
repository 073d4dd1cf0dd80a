package fleet

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// indexWidth is the number of digits of a member index. With at most
// MaxMembers members every index fits, so a member keeps its name however
// the Fleet is scaled.
const indexWidth = 4

// NamePrefix is what members of a replicas Fleet are named after.
func NamePrefix(f *Fleet) string {
	if f.Spec.NamePrefix != "" {
		return f.Spec.NamePrefix
	}
	return f.Name + "-"
}

// MemberName is the name of member index of a Fleet whose prefix is prefix.
func MemberName(prefix string, index int) string {
	return fmt.Sprintf("%s%0*d", prefix, indexWidth, index)
}

// MemberNames returns the planes f asks for, in member order.
func MemberNames(f *Fleet) []string {
	if f.Spec.Replicas == nil {
		return append([]string(nil), f.Spec.Names...)
	}
	n := int(*f.Spec.Replicas)
	prefix := NamePrefix(f)
	names := make([]string, n)
	for i := range names {
		names[i] = MemberName(prefix, i)
	}
	return names
}

// IsMember reports whether f asks for plane.
func IsMember(f *Fleet, plane string) bool {
	if f.Spec.Replicas == nil {
		for _, n := range f.Spec.Names {
			if n == plane {
				return true
			}
		}
		return false
	}
	i := memberIndex(NamePrefix(f), plane)
	return i >= 0 && i < int(*f.Spec.Replicas) && plane == MemberName(NamePrefix(f), i)
}

// memberIndex is the index in a member's name after prefix, or -1.
func memberIndex(prefix, name string) int {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) < indexWidth {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 {
		return -1
	}
	return i
}

// Leaving returns the members in owned that f no longer asks for, in the
// order they are removed: highest index first, then names that carry no
// index (members of an earlier prefix or of spec.names) in reverse order.
func Leaving(f *Fleet, owned []string) []string {
	want := make(map[string]struct{}, len(owned))
	for _, n := range MemberNames(f) {
		want[n] = struct{}{}
	}
	var out []string
	for _, n := range owned {
		if _, ok := want[n]; !ok {
			out = append(out, n)
		}
	}
	prefix := NamePrefix(f)
	sort.Slice(out, func(a, b int) bool {
		ia, ib := memberIndex(prefix, out[a]), memberIndex(prefix, out[b])
		if ia != ib {
			return ia > ib
		}
		return out[a] > out[b]
	})
	return out
}
