package faults

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestMatches(t *testing.T) {
	c := corev1.Container{Name: "app", Image: "registry.example/team/web:broken"}
	labels := map[string]string{"app": "web", "tier": "front"}
	for _, tc := range []struct {
		match Match
		want  bool
	}{
		{Match{}, true},
		{Match{Image: "*:broken"}, true},
		{Match{Image: "*team/web*"}, true},
		{Match{Image: "registry.example/team/web:broke?"}, true},
		{Match{Image: "web:*"}, false},
		{Match{Image: "*:fixed"}, false},
		{Match{Container: "app", Namespace: "prod"}, true},
		{Match{Container: "sidecar"}, false},
		{Match{Namespace: "dev"}, false},
		{Match{PodLabels: map[string]string{"app": "web"}}, true},
		{Match{PodLabels: map[string]string{"app": "db"}}, false},
	} {
		if got := (Fault{Type: CrashLoopBackOff, Match: tc.match}).Matches("prod", labels, c); got != tc.want {
			t.Errorf("%+v matches = %v, want %v", tc.match, got, tc.want)
		}
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		fault  Fault
		code   int32
		reason string
	}{
		{Fault{Type: CrashLoopBackOff}, 1, "Error"},
		{Fault{Type: CrashLoopBackOff, ExitCode: 3}, 3, "Error"},
		{Fault{Type: OOMKilled}, 137, "OOMKilled"},
	} {
		if code, reason := tc.fault.ExitStatus(); code != tc.code || reason != tc.reason {
			t.Errorf("%+v: %d %s, want %d %s", tc.fault, code, reason, tc.code, tc.reason)
		}
	}
}
