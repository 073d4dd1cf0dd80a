package e2e

import (
	"fmt"
	"os"
	"testing"

	"kplane.dev/kplane/test/e2e/framework"
)

// shared is one server (default SQLite datastore) used by every test that
// does not need a server of its own: starting kplane costs seconds, a new
// plane costs milliseconds.
var shared *framework.Server

func TestMain(m *testing.M) {
	if _, err := framework.Binary(); err != nil {
		fmt.Fprintln(os.Stderr, "skipping e2e:", err)
		os.Exit(0)
	}
	s, err := framework.Start(framework.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting shared kplane:", err)
		if s != nil {
			fmt.Fprintln(os.Stderr, s.Log())
			s.Cleanup()
		}
		os.Exit(1)
	}
	shared = s
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "--- shared server log (tail) ---")
		log := s.Log()
		if len(log) > 20000 {
			log = log[len(log)-20000:]
		}
		fmt.Fprintln(os.Stderr, log)
	}
	s.Cleanup()
	os.Exit(code)
}

// uniquePlane returns a plane id not used by any other test.
func uniquePlane(t *testing.T, prefix string) string {
	t.Helper()
	return fmt.Sprintf("%s-%d", prefix, planeSeq.Add(1))
}
