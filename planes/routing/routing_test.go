package routing

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"kplane.dev/kplane/planes"
)

func TestParse(t *testing.T) {
	cases := []struct {
		raw      string
		id, rest string
		code     int32
	}{
		{raw: "/api/v1/pods", id: "root", rest: "/api/v1/pods"},
		{raw: "/", id: "root", rest: "/"},
		{raw: "/clusters/a/control-plane/api/v1/namespaces", id: "a", rest: "/api/v1/namespaces"},
		{raw: "/clusters/a/control-plane", id: "a", rest: "/"},
		{raw: "/clusters/a/control-plane/", id: "a", rest: "/"},
		{raw: "/clusters/Bad_ID/control-plane/api", code: 400},
		{raw: "/clusters/" + strings.Repeat("a", 64) + "/control-plane/api", code: 400},
		{raw: "/clusters/a%2Fb/control-plane/api", code: 400},
		{raw: "/clusters/*/control-plane/api", code: 400},
		{raw: "/clusters//control-plane/api", code: 400},
		{raw: "/clusters/a/control-plane/../../clusters/b/control-plane/api", code: 400},
		{raw: "/clusters/a/control-plane/%2e%2e/%2e%2e/clusters/b/control-plane/api", code: 400},
		{raw: "/clusters/a/control-plane//api", code: 400},
		{raw: "//clusters/b/control-plane/api", code: 400},
		{raw: "/clusters/a", code: 404},
		{raw: "/clusters/a/other/api", code: 404},
		{raw: "/clusters", code: 404},
		{raw: "/clusters/", code: 404},
	}
	for _, c := range cases {
		u, err := url.ParseRequestURI(c.raw)
		if err != nil {
			t.Fatalf("%s: %v", c.raw, err)
		}
		id, rest, err := Parse(u.Path, u.EscapedPath())
		if c.code != 0 {
			if err == nil {
				t.Errorf("%s: got plane %q rest %q, want error %d", c.raw, id, rest, c.code)
				continue
			}
			if got := apierrors.ReasonForError(err); apiCode(err) != c.code {
				t.Errorf("%s: got %v (%s), want code %d", c.raw, err, got, c.code)
			}
			if c.code == http.StatusNotFound && !strings.Contains(err.Error(), "/clusters/<id>/control-plane/") {
				t.Errorf("%s: the 404 does not say how a plane's paths are made: %v", c.raw, err)
			}
			continue
		}
		if err != nil || id != c.id || rest != c.rest {
			t.Errorf("%s: got (%q, %q, %v), want (%q, %q)", c.raw, id, rest, err, c.id, c.rest)
		}
	}
}

func apiCode(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}

func TestWithRouting(t *testing.T) {
	var gotPlane, gotPath string
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPlane, _ = planes.FromContext(r.Context())
		gotPath = r.URL.Path
	})
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme)
	h := WithRouting(inner, codecs)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/clusters/team-a/control-plane/api/v1/pods", nil))
	if gotPlane != "team-a" || gotPath != "/api/v1/pods" {
		t.Fatalf("got plane %q path %q", gotPlane, gotPath)
	}

	gotPlane = ""
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/clusters/team-a/control-plane/metrics", nil))
	if rec.Code != http.StatusNotFound || gotPlane != "" {
		t.Fatalf("server-wide path inside a plane: code %d, reached handler: %v", rec.Code, gotPlane != "")
	}
	if body := rec.Body.String(); !strings.Contains(body, `could not find the requested path \"/metrics\": plane team-a serves only /api, /apis`) {
		t.Fatalf("server-wide path inside a plane: the Status does not say what a plane serves: %s", body)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/clusters/Bad_ID/control-plane/api", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"kind":"Status"`) {
		t.Fatalf("bad id: code %d body %s", rec.Code, rec.Body.String())
	}

	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil))
	if gotPlane != planes.Root || gotPath != "/metrics" {
		t.Fatalf("root: got plane %q path %q", gotPlane, gotPath)
	}
}
