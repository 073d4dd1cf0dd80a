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
var featureGates = map[string]bool{
	"WatchListClient": false,
}

func setFeatureGates() error {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(featureGates); err != nil {
		return fmt.Errorf("setting feature gates: %w", err)
	}
	return nil
}
