package driver

import (
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// NewClient is an etcd client for endpoints with the client TLS files (none
// for plain http or kine's socket), as the apiserver connects to them.
func NewClient(endpoints []string, caFile, certFile, keyFile string) (*clientv3.Client, error) {
	// Its errors are returned; its own log would repeat them in another format.
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if caFile != "" || certFile != "" {
		tlsInfo := transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile}
		tlsConfig, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("datastore %q: client TLS: %v", Redact(strings.Join(endpoints, ",")), err)
		}
		cfg.TLS = tlsConfig
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("datastore %q is unreachable: %v", Redact(strings.Join(endpoints, ",")), err)
	}
	return client, nil
}

// Client is an etcd client of the datastore: the same endpoints and
// credentials the apiserver uses, for the few records kplane keeps beside
// the apiserver's (the shared credentials of servers joined with a token).
// The caller closes it.
func (d *Datastore) Client() (*clientv3.Client, error) {
	return NewClient(d.Endpoints, d.CAFile, d.CertFile, d.KeyFile)
}
