package startupgc

import (
	"os"
	"runtime/debug"
	"sync"
	"time"
)

const (
	// memoryLimit bounds the heap while the collector is off: a start that
	// allocates more than usual (about 80 MiB of garbage with 10,000
	// Planes stored) collects at this limit instead of growing unbounded.
	memoryLimit = 256 << 20
	// deadline gives the collector back if the server is not ready by
	// then (a datastore that does not answer, a start that fails in a way
	// nothing reports): the pause is for start-up, never for serving.
	deadline = time.Minute
)

// Pause turns the garbage collector off, below a memory limit, and returns
// what turns it back on with the settings it had; calling that more than
// once is harmless, and it runs by itself after a minute. With GOGC or
// GOMEMLIMIT set in the environment Pause changes nothing: whoever set
// them chose how the collector runs.
func Pause() (resume func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	percent := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(min(memoryLimit, debug.SetMemoryLimit(-1)))
	var once sync.Once
	timer := time.AfterFunc(deadline, func() { restore(&once, percent, limit) })
	return func() {
		timer.Stop()
		restore(&once, percent, limit)
	}
}

func restore(once *sync.Once, percent int, limit int64) {
	once.Do(func() {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(percent)
	})
}
