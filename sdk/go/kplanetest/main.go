package kplanetest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// The Env of Main, for Plane. It is the one package-level variable: a
// test function has no other way to reach what TestMain started.
var (
	defaultMu  sync.RWMutex
	defaultEnv *Env
)

// Main is a TestMain: it starts an Env with opts, runs the tests, stops
// the Env and exits with the tests' status.
//
//	func TestMain(m *testing.M) { kplanetest.Main(m, kplanetest.Options{CRDDirectoryPaths: []string{"../config/crd/bases"}}) }
func Main(m *testing.M, opts Options) {
	os.Exit(run(m, opts))
}

func run(m *testing.M, opts Options) int {
	env, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	SetDefault(env)
	code := m.Run()
	SetDefault(nil)
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "kplanetest: stopping: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// SetDefault makes env the Env of Plane (Main does it); nil clears it.
func SetDefault(env *Env) {
	defaultMu.Lock()
	defaultEnv = env
	defaultMu.Unlock()
}

// Default is the Env of Main, or nil.
func Default() *Env {
	defaultMu.RLock()
	defer defaultMu.RUnlock()
	return defaultEnv
}

// Plane is Default().NewPlane(t, opts...): a *rest.Config of a new plane of
// the Env Main started, deleted when t ends.
func Plane(t testing.TB, opts ...PlaneOption) *rest.Config {
	t.Helper()
	env := Default()
	if env == nil {
		t.Fatal("kplanetest.Plane: no Env; call kplanetest.Main(m, opts) from TestMain, or use env.NewPlane(t) on an Env from kplanetest.Start")
	}
	return env.NewPlane(t, opts...)
}
