package startupgc

import (
	"math"
	"runtime/debug"
	"testing"
)

// settings reads the collector's GOGC and memory limit without changing
// them.
func settings() (percent int, limit int64) {
	percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1)
}

func TestPauseTurnsTheCollectorOffUntilResumed(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	debug.SetGCPercent(150)
	debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(100) })

	resume := Pause()
	if percent, limit := settings(); percent != -1 || limit != memoryLimit {
		t.Fatalf("while paused: GOGC %d, memory limit %d; want -1, %d", percent, limit, memoryLimit)
	}
	resume()
	if percent, limit := settings(); percent != 150 || limit != math.MaxInt64 {
		t.Fatalf("resumed: GOGC %d, memory limit %d; want 150, %d", percent, limit, int64(math.MaxInt64))
	}
	// A later change of the settings survives a second resume.
	debug.SetGCPercent(120)
	resume()
	if percent, _ := settings(); percent != 120 {
		t.Fatalf("a second resume set GOGC to %d", percent)
	}
}

func TestPauseKeepsALowerMemoryLimit(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	debug.SetMemoryLimit(64 << 20)
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })

	resume := Pause()
	defer resume()
	if _, limit := settings(); limit != 64<<20 {
		t.Fatalf("memory limit while paused %d, want the lower one already set, %d", limit, 64<<20)
	}
}

func TestPauseLeavesTheEnvironmentsSettings(t *testing.T) {
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv("GOGC", "")
			t.Setenv("GOMEMLIMIT", "")
			t.Setenv(env, "200")
			before, limit := settings()
			resume := Pause()
			defer resume()
			if percent, l := settings(); percent != before || l != limit {
				t.Fatalf("with %s set: GOGC %d, memory limit %d; want them unchanged (%d, %d)", env, percent, l, before, limit)
			}
		})
	}
}
