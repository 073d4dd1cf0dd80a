package loopback

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	restclient "k8s.io/client-go/rest"

	"kplane.dev/kplane/planes"
)

// A routed request goes to its context's plane with the headers its
// context carries; a root request goes to the bare path with them.
func TestRoutedRequestsCarryTheirContextsHeaders(t *testing.T) {
	type seen struct{ path, revision, other string }
	got := make(chan seen, 1)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		got <- seen{req.URL.Path, req.Header.Get("X-Revision"), req.Header.Get("X-Other")}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer server.Close()
	client, err := restclient.HTTPClientFor(Routed(&restclient.Config{Host: server.URL}))
	if err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, server.URL+"/api/v1/namespaces", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	ctx := WithRequestHeader(WithRequestHeader(context.Background(), "X-Other", "o"), "X-Revision", "1")
	ctx = WithRequestHeader(ctx, "X-Revision", "2")
	for _, tc := range []struct {
		ctx  context.Context
		want seen
	}{
		{planes.WithPlane(ctx, "p"), seen{planes.Path("p") + "/api/v1/namespaces", "2", "o"}},
		{planes.WithPlane(ctx, planes.Root), seen{"/api/v1/namespaces", "2", "o"}},
		{planes.WithPlane(context.Background(), "p"), seen{planes.Path("p") + "/api/v1/namespaces", "", ""}},
	} {
		if err := get(tc.ctx); err != nil {
			t.Fatal(err)
		}
		if s := <-got; s != tc.want {
			t.Errorf("got %+v, want %+v", s, tc.want)
		}
	}
	if err := get(context.Background()); err == nil {
		t.Error("a request without a plane was sent")
	}
}
