package server

import (
	"fmt"
	"io"
	"strings"

	"github.com/sirupsen/logrus"

	"kplane.dev/kplane/server/version"
)

// banner tells whoever started the server what they got and how to use
// it. With --log-format json it is one log entry, so that log pipelines
// never see a line that is not JSON.
func (s *Server) banner(w io.Writer) {
	planeCmd := fmt.Sprintf("kplane kubeconfig --data-dir %s <plane-id> > plane.kubeconfig", s.config.DataDir)
	if s.config.Options.LogFormat == "json" {
		logrus.WithFields(logrus.Fields{
			"version":         version.Version,
			"kubernetes":      version.Kubernetes(),
			"datastore":       s.datastore.Description,
			"url":             s.config.ServerURL,
			"kubeconfig":      s.config.KubeconfigPath,
			"manifests":       s.config.ManifestsDir,
			"planeKubeconfig": planeCmd,
		}).Info("kplane is starting")
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", version.String())
	fmt.Fprintf(&b, "  datastore   %s\n", s.datastore.Description)
	fmt.Fprintf(&b, "  url         %s   (plane <id>: %s/clusters/<id>/control-plane)\n", s.config.ServerURL, s.config.ServerURL)
	fmt.Fprintf(&b, "  kubeconfig  export KUBECONFIG=%s   (admin, every plane)\n", s.config.KubeconfigPath)
	fmt.Fprintf(&b, "  plane       %s\n", planeCmd)
	fmt.Fprintf(&b, "  manifests   %s\n", s.config.ManifestsDir)
	_, _ = io.WriteString(w, b.String())
}
