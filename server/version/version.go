// Package version reports the kplane version and the Kubernetes version its
// planes serve.
package version

import (
	"runtime/debug"
	"strings"

	k8sversion "k8s.io/component-base/version"
)

// Version is set at build time (-ldflags "-X kplane.dev/kplane/server/version.Version=…").
var Version = "dev"

// Kubernetes is the Kubernetes version served by every plane: the
// k8s.io/kubernetes module kplane is built from.
func Kubernetes() string {
	if v := k8sversion.Get().GitVersion; strings.HasPrefix(v, "v1.") {
		return v
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/kubernetes" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

// String is the one-line version banner.
func String() string {
	return "kplane " + Version + " (Kubernetes " + Kubernetes() + ")"
}
