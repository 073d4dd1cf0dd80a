package apiserver

import (
	"fmt"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// featureGates are the process-wide feature settings kplane depends on.
//
// WatchListClient=false: with it on, the reflector that fills each shared
// watch cache streams the initial state into a temporary store keyed by
// namespace/name, which merges same-named objects of different planes (the
// cache would lose every plane but one after a restart). The paginated LIST
// path hands every object to the watch cache, keyed by plane.
//
// WatchList=false: with it on, every watch without a resourceVersion is
// turned into a "send initial events" watch that first waits until the
// shared cache has caught up with the datastore's newest revision. On kine
// that revision can run ahead of its progress notifications under
// concurrent writes, and such watches would stall for seconds and fail. A
// watch without resourceVersion then starts from the cache, as before 1.33;
// clients that ask for watch-list fall back to LIST+WATCH.
//
// ListFromCacheSnapshot=false: with it on, every shared watch cache keeps a
// copy-on-write snapshot of its tree per event for 75 seconds, so that
// paginated and exact-revision lists can be served from memory. One cache
// holds every plane, so that history grows with the write rate of all
// planes together (90 MiB after creating and deleting 1,000 planes) and
// is kept whether or not anyone pages. Those lists read the datastore
// instead; plain lists and the snapshot still come from memory.
//
// UnknownVersionInteroperabilityProxy=false: it proxies a request to the
// peer apiserver that serves a resource this one does not, found through
// peer endpoint leases each server writes and removes on shutdown. Every
// kplane server serves the same APIs; the leases were only datastore
// writes, and a server stopped before writing its first one logged its
// removal as an error.
//
// APIServerIdentity=false: each server would keep an identity Lease
// (`apiserver-<hash of the host name>` in the root plane's kube-system),
// renewed every 10 s, and delete it at shutdown with a 10 s bound. What
// reads those Leases (the storage version API, the peer proxy above) is
// off, servers on one host would share one, and kplane keeps its own
// presence Lease per server (planes/lifecycle). They cost an idle SQLite
// server a datastore write every 10 s, and a server stopping without
// quorum waited the delete's 10 s before anything else of its shutdown.
//
// SizeBasedListCostEstimate=false: it tracks the size of every key to weigh
// LIST requests for priority and fairness, which kplane does not run.
var featureGates = map[string]bool{
	"WatchListClient":           false,
	"WatchList":                 false,
	"SizeBasedListCostEstimate": false,
	"ListFromCacheSnapshot":     false,
	// See above.
	"UnknownVersionInteroperabilityProxy": false,
	"APIServerIdentity":                   false,
}

func setFeatureGates() error {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(featureGates); err != nil {
		return fmt.Errorf("setting feature gates: %w", err)
	}
	return nil
}
