package lifecycle

import "testing"

// A busy plane's status is not rewritten for every byte: only a change of
// objects or watches, or of bytes by more than 1/32, is written.
func TestUsageChanged(t *testing.T) {
	last := Usage{Objects: 10, Bytes: 32000, Watches: 1}
	for _, c := range []struct {
		now  Usage
		want bool
	}{
		{last, false},
		{Usage{Objects: 10, Bytes: 32500, Watches: 1}, false},
		{Usage{Objects: 10, Bytes: 31500, Watches: 1}, false},
		{Usage{Objects: 10, Bytes: 33001, Watches: 1}, true},
		{Usage{Objects: 10, Bytes: 30999, Watches: 1}, true},
		{Usage{Objects: 11, Bytes: 32000, Watches: 1}, true},
		{Usage{Objects: 10, Bytes: 32000, Watches: 2}, true},
	} {
		if got := usageChanged(last, c.now); got != c.want {
			t.Errorf("usageChanged(%+v, %+v) = %v, want %v", last, c.now, got, c.want)
		}
	}
	if !usageChanged(Usage{}, Usage{Bytes: 1}) {
		t.Error("bytes from none: want a write")
	}
}
