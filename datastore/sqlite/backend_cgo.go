//go:build cgo

package sqlite

import (
	"github.com/k3s-io/kine/pkg/drivers"
	kinesqlite "github.com/k3s-io/kine/pkg/drivers/sqlite"
)

// Built with cgo, kine's SQLite is the C library (go-sqlite3), which keeps
// its statements itself; a second SQLite library in the process must not
// open the same file (each keeps its own POSIX locks, and closing one's
// file drops the other's): kine's backend serves as it is.
func init() { drivers.Register(Scheme, kinesqlite.New) }
