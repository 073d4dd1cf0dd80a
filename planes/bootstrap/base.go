package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	"kplane.dev/kplane/planes"
)

// baseID names the base plane that holds what b writes: a digest of the
// objects, so that a server started with another policy, CA or service
// range writes a new base for the planes made from then on, while planes
// made earlier keep the base they started on.
func (b *Bootstrapper) baseID() string {
	var lines []string
	add := func(resource string, obj any) {
		data, err := json.Marshal(obj)
		if err != nil {
			// Bootstrap objects are plain API types: they always encode.
			panic(err)
		}
		lines = append(lines, resource+" "+string(data))
	}
	for _, ns := range SystemNamespaces {
		add("namespaces", ns)
		add("configmaps", b.rootCA(ns))
		add("serviceaccounts", defaultServiceAccount(ns))
	}
	if !b.config.NoService {
		add("services", b.kubernetesService())
	}
	for _, obj := range b.policy.all() {
		add(obj.resource, obj.object)
	}
	// The policy lists some objects in map order.
	sort.Strings(lines)
	h := sha256.New()
	h.Write([]byte("kplane base v1\n"))
	for _, l := range lines {
		h.Write([]byte(l + "\n"))
	}
	return planes.BasePrefix + hex.EncodeToString(h.Sum(nil))[:16]
}

// BaseID is the base plane of this bootstrap: planes made from nothing are
// layers over it and store only what they change.
func (b *Bootstrapper) BaseID() string { return b.base }
