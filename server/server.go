package server

import (
	"context"
	"os"

	"github.com/sirupsen/logrus"

	"kplane.dev/kplane/datastore"
	"kplane.dev/kplane/server/apiserver"
)

// Server is a running kplane.
type Server struct {
	config    CompletedConfig
	datastore *datastore.Datastore
	api       *apiserver.Server
}

// Datastore describes the datastore in use.
func (s *Server) Datastore() *datastore.Datastore { return s.datastore }

// Run serves until ctx is done. Shutdown is graceful: the apiserver stops
// accepting requests and finishes in-flight ones, then the datastore is
// closed.
func (s *Server) Run(ctx context.Context) error {
	s.banner(os.Stderr)
	renewing, stopRenewing := context.WithCancel(ctx)
	defer stopRenewing()
	go s.config.Certificates.Run(renewing)
	err := s.api.Run(ctx)
	s.datastore.Close()
	if err != nil {
		return err
	}
	logrus.Info("kplane stopped")
	return nil
}
