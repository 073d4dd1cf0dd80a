// Package loopback builds in-process clients of the apiserver that address
// a plane: either a fixed one, or the plane carried by each call's context
// (for upstream components that receive the request context and call back
// into the API, such as pod eviction reading PodDisruptionBudgets).
package loopback

import (
	"context"
	"fmt"
	"net/http"

	restclient "k8s.io/client-go/rest"

	"kplane.dev/kplane/planes"
)

// ForPlane returns a copy of config whose requests go to plane.
func ForPlane(config *restclient.Config, plane string) *restclient.Config {
	c := restclient.CopyConfig(config)
	c.Host += planes.Path(plane)
	return c
}

// Routed returns a copy of config that sends each request to the plane in
// the request's context and refuses requests whose context has none, so an
// upstream component can never reach the wrong plane by accident.
func Routed(config *restclient.Config) *restclient.Config {
	c := restclient.CopyConfig(config)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &router{next: rt} })
	return c
}

type router struct{ next http.RoundTripper }

func (r *router) RoundTrip(req *http.Request) (*http.Response, error) {
	plane, ok := planes.FromContext(req.Context())
	if !ok {
		return nil, fmt.Errorf("loopback request %s %s without a plane refused", req.Method, req.URL.Path)
	}
	headers := headersFrom(req.Context())
	if plane == planes.Root && len(headers) == 0 {
		return r.next.RoundTrip(req)
	}
	routed := req.Clone(req.Context())
	for name, value := range headers {
		routed.Header.Set(name, value)
	}
	if plane != planes.Root {
		routed.URL.Path = planes.Path(plane) + req.URL.Path
		routed.URL.RawPath = ""
	}
	return r.next.RoundTrip(routed)
}

type headersKey struct{}

// WithRequestHeader returns a copy of ctx whose requests through a Routed
// client carry header name set to value: what a call knows about the
// plane it addresses (the reset it decided after) goes with the call's
// context, as the plane does.
func WithRequestHeader(ctx context.Context, name, value string) context.Context {
	headers := map[string]string{name: value}
	for n, v := range headersFrom(ctx) {
		if n != name {
			headers[n] = v
		}
	}
	return context.WithValue(ctx, headersKey{}, headers)
}

func headersFrom(ctx context.Context) map[string]string {
	headers, _ := ctx.Value(headersKey{}).(map[string]string)
	return headers
}

// Controller returns a copy of Routed(config) that sends header (set to
// "true") with every request: the lifecycle filter's no-provision header,
// so that work a controller still holds for a deleted plane fails instead
// of bringing the plane back.
func Controller(config *restclient.Config, header string) *restclient.Config {
	c := Routed(config)
	c.Wrap(WithHeader(header))
	return c
}

// WithHeader returns a transport wrapper that sets header to "true".
func WithHeader(header string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper { return &withHeader{next: rt, header: header} }
}

type withHeader struct {
	next   http.RoundTripper
	header string
}

func (h *withHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(h.header, "true")
	return h.next.RoundTrip(req)
}
