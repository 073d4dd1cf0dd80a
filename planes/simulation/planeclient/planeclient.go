// Package planeclient is the in-process client of the upstream workload
// controllers: they see every plane's objects with the plane folded into
// the namespace (planens), and this client unfolds it on the way out.
//
// A request whose path names a folded namespace (or a folded node name) is
// sent to that plane with the plane removed from the path and from the
// body's namespace and nodeName fields (and the node names of
// matchFields); the answer gets the plane folded
// back in, so an object a controller reads back from a write is keyed as
// the ones its listers hold. Requests that name no plane go to the plane in
// their context (loopback.Routed) and are refused without one; an Event
// without one gets a BadRequest Status instead, which the controllers'
// event recorders do not retry. A write refused because its plane is being
// deleted, or is gone, answers as a write to a terminating namespace (the
// plane is part of the namespace the controllers see). An Event's create is
// answered at once and written in the background, every plane in turn
// (Events), pinned to the plane's reset revision at its create: one still
// waiting when the plane is reset is refused, not written into the plane
// the reset returned. A ReplicaSet create for a pod template its Deployment no
// longer has is refused, as a decision made on an older copy
// (staleReplicaSet). JSON only: bodies are rewritten as JSON.
package planeclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	restclient "k8s.io/client-go/rest"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/simulation/planens"
)

// ResetRevisions returns a plane's reset revision
// (lifecycle.Manager.ResetRevision).
type ResetRevisions func(plane string) uint64

// Config returns a copy of routed (a loopback.Controller config) whose
// requests may name their plane in a folded namespace or node name. Its
// Event creates go through events while it runs (nil: sent at once);
// resets (nil: none) pins what it checks before a write to the plane's
// reset revision (staleReplicaSet).
func Config(routed *restclient.Config, events *Events, resets ResetRevisions) *restclient.Config {
	c := restclient.CopyConfig(routed)
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &unfold{next: rt, events: events, statusWrites: newStatusWrites(), resets: resets}
	})
	return c
}

type unfold struct {
	next         http.RoundTripper
	events       *Events
	statusWrites *statusWrites
	resets       ResetRevisions
}

func (u *unfold) RoundTrip(req *http.Request) (*http.Response, error) {
	plane, path := splitPath(req.URL.Path)
	if plane == "" {
		if _, ok := planes.FromContext(req.Context()); !ok && isEventWrite(req) {
			return planelessEvent(req), nil
		}
		return u.next.RoundTrip(req)
	}
	out := req.Clone(planes.WithPlane(req.Context(), plane))
	out.URL.Path, out.URL.RawPath = path, ""
	var body []byte
	if req.Body != nil && req.Body != http.NoBody && isJSON(req.Header.Get("Content-Type")) {
		original, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the body of %s %s: %w", req.Method, req.URL.Path, err)
		}
		body = rewriteBytes(original, func(s string) string { return planens.Strip(s) })
		if derivedStatus(out) {
			body = u.statusWrites.catchUp(plane, out.URL.Path, body)
		}
		setBody(out, body)
		if u.events != nil && isEventCreate(out) {
			// Written later, perhaps after a reset that made the Event's
			// story untrue: the reset refuses it then.
			u.pinToReset(plane, out)
			if resp, taken := u.events.take(plane, out, body, original, u.next); taken {
				return resp, nil
			}
		}
	}
	if refused := u.staleReplicaSet(plane, out, body); refused != nil {
		return refused, nil
	}
	resp, err := u.next.RoundTrip(out)
	sent := body
	if err == nil && resp.StatusCode == http.StatusConflict && derivedStatus(out) {
		resp, sent, err = u.reapplyStatus(out, body, resp)
	}
	if err == nil && (resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusNotFound) {
		resp, err = planeDeleted(resp)
	}
	if err != nil || req.URL.Query().Get("watch") == "true" || !isJSON(resp.Header.Get("Content-Type")) {
		return resp, err
	}
	folded, err := rewrite(resp.Body, func(s string) string {
		if s == "" || strings.Contains(s, planens.Separator) {
			return s
		}
		return planens.Join(plane, s)
	})
	if err != nil {
		return nil, fmt.Errorf("folding the answer to %s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode == http.StatusOK && derivedStatus(out) {
		u.statusWrites.record(plane, out.URL.Path, sent, folded)
	}
	resp.Body = io.NopCloser(bytes.NewReader(folded))
	resp.ContentLength = int64(len(folded))
	resp.Header.Set("Content-Length", strconv.Itoa(len(folded)))
	return resp, nil
}

// pinToReset makes req carry plane's reset revision now: once the plane
// is reset, the API refuses it (lifecycle.ResetRevisionHeader).
func (u *unfold) pinToReset(plane string, req *http.Request) {
	if u.resets != nil {
		req.Header.Set(lifecycle.ResetRevisionHeader, strconv.FormatUint(u.resets(plane), 10))
	}
}

// isEventWrite reports whether req writes an Event (core or events.k8s.io).
func isEventWrite(req *http.Request) bool {
	if req.Method == http.MethodGet || req.Method == http.MethodDelete {
		return false
	}
	// .../namespaces/<ns>/events[/<name>]
	segments := strings.Split(req.URL.Path, "/")
	for i, s := range segments {
		if s == "events" && i >= 2 && segments[i-2] == "namespaces" && i >= len(segments)-2 {
			return true
		}
	}
	return false
}

// planelessEvent is the answer to an Event that names no plane: upstream's
// endpoints controller reports a failed create about an Endpoints object
// it built without a namespace, so its Event lands in namespace default
// with no plane folded in. A Status error makes client-go's recorder drop
// it at once; a transport error (loopback's refusal) had it retried
// twelve times, ten seconds apart, each an error line in the server's log.
func planelessEvent(req *http.Request) *http.Response {
	return statusResponse(req, apierrors.NewBadRequest("the event names no plane (its object has no namespace); dropped").Status())
}

// statusResponse is a refusal of req made here, not by the API, in the
// form the API gives its own.
func statusResponse(req *http.Request, status metav1.Status) *http.Response {
	status.APIVersion, status.Kind = "v1", "Status"
	body, _ := json.Marshal(status) // a Status has nothing that fails to encode
	return jsonResponse(req, int(status.Code), body)
}

// jsonResponse is an answer to req made here, not by the API.
func jsonResponse(req *http.Request, code int, body []byte) *http.Response {
	return &http.Response{
		StatusCode:    code,
		Status:        fmt.Sprintf("%d %s", code, http.StatusText(code)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{runtime.ContentTypeJSON}, "Content-Length": []string{strconv.Itoa(len(body))}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// splitPath finds the folded segment of path (a namespace or a node name)
// and returns its plane and the path without it.
func splitPath(path string) (plane, unfolded string) {
	segments := strings.Split(path, "/")
	for i, s := range segments {
		if p, rest, ok := planens.Split(s); ok {
			segments[i] = rest
			return p, strings.Join(segments, "/")
		}
	}
	return "", path
}

func isJSON(contentType string) bool {
	media, _, err := mime.ParseMediaType(contentType)
	return err == nil && (media == "application/json" || strings.HasSuffix(media, "+json"))
}

func setBody(req *http.Request, body []byte) {
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Length", strconv.Itoa(len(body)))
}
