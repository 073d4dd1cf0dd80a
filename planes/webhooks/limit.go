package webhooks

import (
	"fmt"
	"net/http"

	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/planes"
)

// planeLimit bounds the webhook calls of one plane in flight at once.
type planeLimit struct {
	slots chan struct{}
}

// newPlaneLimit returns a limit of n calls; n <= 0 is no limit.
func newPlaneLimit(n int) *planeLimit {
	if n <= 0 {
		return &planeLimit{}
	}
	return &planeLimit{slots: make(chan struct{}, n)}
}

// wrap is a transport wrapper that takes a slot for each call, and fails
// the call when none is free instead of waiting: a waiting request would
// hold its place in the server's in-flight limit all the same.
func (l *planeLimit) wrap(rt http.RoundTripper) http.RoundTripper {
	if l.slots == nil {
		return rt
	}
	return limitedTransport{next: rt, limit: l}
}

type limitedTransport struct {
	next  http.RoundTripper
	limit *planeLimit
}

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case t.limit.slots <- struct{}{}:
	default:
		return nil, fmt.Errorf("the plane has %d webhook calls in flight, its limit (--webhook-max-in-flight-per-plane)", cap(t.limit.slots))
	}
	defer func() { <-t.limit.slots }()
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go see through the wrapper.
func (t limitedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// yieldSeat gives the calling request's plane seat up for the webhook
// call (planes.Seat): a webhook that reads its plane back would otherwise
// wait for the request that waits on it when the plane is at its share of
// the server.
func yieldSeat(rt http.RoundTripper) http.RoundTripper { return yieldingTransport{next: rt} }

type yieldingTransport struct{ next http.RoundTripper }

func (t yieldingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	back := planes.YieldSeat(req.Context())
	defer back()
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go see through the wrapper.
func (t yieldingTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// ResolverWrapper returns the authentication resolver wrapper of webhook
// clients that belong to no plane's bound (CRD conversion webhooks, whose
// handlers planes with identical CRDs share): no server credentials, the
// egress policy's Dial.
func (p *EgressPolicy) ResolverWrapper() webhookutil.AuthenticationInfoResolverWrapper {
	return egressResolverWrapper(p, newPlaneLimit(0))
}

// egressResolverWrapper replaces the authentication resolver of a plane's
// webhook clients: they carry no credentials of the server (upstream's
// default resolver would hand out the in-cluster config for
// kubernetes.default.svc, and kube-apiserver's wrapper its loopback
// credentials), dial through the egress policy and count against the
// plane's limit. It is the hook kube-apiserver itself uses for its egress
// selector.
func egressResolverWrapper(policy *EgressPolicy, limit *planeLimit) webhookutil.AuthenticationInfoResolverWrapper {
	return func(webhookutil.AuthenticationInfoResolver) webhookutil.AuthenticationInfoResolver {
		config := func() *rest.Config {
			c := &rest.Config{UserAgent: rest.DefaultKubernetesUserAgent(), Dial: policy.DialContext}
			c.Wrap(limit.wrap)
			c.Wrap(yieldSeat)
			return c
		}
		return &webhookutil.AuthenticationInfoResolverDelegator{
			ClientConfigForFunc:        func(string) (*rest.Config, error) { return config(), nil },
			ClientConfigForServiceFunc: func(string, string, int) (*rest.Config, error) { return config(), nil },
		}
	}
}
