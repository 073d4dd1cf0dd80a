package kubelet

import (
	"testing"
	"time"
)

// A pod's annotation wins over its plane's setting, which wins over the
// server's; an annotation that is not a duration of at least 0 is ignored.
func TestFirstDuration(t *testing.T) {
	for _, tc := range []struct {
		annotation    string
		plane, server time.Duration
		want          time.Duration
	}{
		{"2s", time.Minute, time.Hour, 2 * time.Second},
		{"0s", time.Minute, time.Hour, 0},
		{"", time.Minute, time.Hour, time.Minute},
		{"soon", time.Minute, time.Hour, time.Minute},
		{"-1s", 0, time.Hour, time.Hour},
		{"", 0, 0, 0},
	} {
		if got := firstDuration(tc.annotation, tc.plane, tc.server); got != tc.want {
			t.Errorf("firstDuration(%q, %s, %s) = %s, want %s", tc.annotation, tc.plane, tc.server, got, tc.want)
		}
	}
}
