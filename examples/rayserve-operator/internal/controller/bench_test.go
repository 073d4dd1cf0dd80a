package controller

import (
	"testing"
	"time"

	"kplane.dev/kplane/sdk/go/kplanetest"
)

// BenchmarkNewPlane times kplanetest.Plane one plane after another: a new
// plane with the RayServe CRD Established, until its *rest.Config is
// returned. The planes are deleted when the benchmark ends, off the clock.
// scripts/bench (scenario gotest) reads the times from $RAYSERVE_TIMINGS.
func BenchmarkNewPlane(b *testing.B) {
	timings := newTimings("kplane-plane")
	b.Cleanup(func() {
		if len(timings.Setup) > 0 {
			timings.write(b)
		}
	})
	for b.Loop() {
		start := time.Now()
		kplanetest.Plane(b)
		timings.addSetup(time.Since(start))
	}
}
