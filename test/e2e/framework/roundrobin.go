package framework

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// RoundRobin sends each request to the next of its servers in turn, as a
// load balancer in front of servers sharing one datastore would: a write
// through one server is read, listed and watched through the others. The
// servers share their CA and admin token (they joined one another).
type RoundRobin struct {
	hosts []string
	next  atomic.Uint64
	first *Server
	sent  []atomic.Int64
}

// NewRoundRobin spreads requests over servers.
func NewRoundRobin(servers ...*Server) *RoundRobin {
	r := &RoundRobin{first: servers[0], sent: make([]atomic.Int64, len(servers))}
	for _, s := range servers {
		u, err := url.Parse(s.URL)
		if err != nil {
			panic("framework: a server's URL does not parse: " + s.URL)
		}
		r.hosts = append(r.hosts, u.Host)
	}
	return r
}

// RESTConfig is an admin client config of plane whose requests take the
// servers in turn.
func (r *RoundRobin) RESTConfig(plane string) *rest.Config {
	cfg := r.first.RESTConfig(plane)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { return &roundRobinTransport{r: r, next: next} })
	return cfg
}

// Client is an admin clientset of plane whose requests take the servers in
// turn.
func (r *RoundRobin) Client(tb testing.TB, plane string) *kubernetes.Clientset {
	tb.Helper()
	c, err := kubernetes.NewForConfig(r.RESTConfig(plane))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// Sent is how many requests went to each server, in the order given.
func (r *RoundRobin) Sent() []int64 {
	out := make([]int64, len(r.sent))
	for i := range r.sent {
		out[i] = r.sent[i].Load()
	}
	return out
}

type roundRobinTransport struct {
	r    *RoundRobin
	next http.RoundTripper
}

func (t *roundRobinTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	i := int(t.r.next.Add(1)-1) % len(t.r.hosts)
	t.r.sent[i].Add(1)
	host := t.r.hosts[i]
	req = req.Clone(req.Context())
	req.URL.Host, req.Host = host, host
	return t.next.RoundTrip(req)
}
