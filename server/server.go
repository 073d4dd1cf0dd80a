package server

import (
	"context"
	"os"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"kplane.dev/kplane/datastore"
	"kplane.dev/kplane/server/apiserver"
)

// Server is a running kplane.
type Server struct {
	config    CompletedConfig
	datastore *datastore.Datastore
	api       *apiserver.Server
	// membersClient serves the join requests of an embedded etcd
	// cluster's other servers (nil: not a member of one).
	membersClient *clientv3.Client
	// deleter deletes records in batches for the apiserver's wipes (nil:
	// the datastore takes one deletion per transaction).
	deleter *datastore.Deleter
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
	if s.membersClient != nil {
		s.membersClient.Close()
	}
	if s.deleter != nil {
		s.deleter.Close()
	}
	s.datastore.Close()
	if err != nil {
		return err
	}
	logrus.Info("kplane stopped")
	return nil
}
