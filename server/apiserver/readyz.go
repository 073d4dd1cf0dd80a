package apiserver

import (
	"fmt"
	"net/http"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
)

// addReadyzChecks adds checks to /readyz. The apiserver serves each check
// on /readyz/<name> as named when it installs /readyz; a grouped check,
// whose name carries changing details (the certificates' expiry dates), is
// also served on the stable /readyz/<group>.
func addReadyzChecks(server *genericapiserver.GenericAPIServer, checks []healthz.HealthChecker) error {
	if err := server.AddReadyzChecks(checks...); err != nil {
		return fmt.Errorf("adding readyz checks: %w", err)
	}
	for _, check := range checks {
		if grouped, ok := check.(healthz.GroupedHealthChecker); ok {
			server.Handler.NonGoRestfulMux.Handle("/readyz/"+grouped.GroupName(), checkHandler(grouped))
		}
	}
	return nil
}

// checkHandler answers like the apiserver's own /readyz/<check>: "ok", or
// 500 with the reason.
func checkHandler(check healthz.HealthChecker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := check.Check(r); err != nil {
			http.Error(w, fmt.Sprintf("internal server error: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fmt.Fprint(w, "ok")
	})
}
