package audit

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"

	"kplane.dev/kplane/planes"
)

const (
	// Path is where a plane serves its trail.
	Path = "/audit"
	// ContentType of the trail: one audit.k8s.io/v1 Event per line.
	ContentType = "application/x-ndjson"
	// Group and Resource are what the plane's RBAC must allow (get; watch
	// to follow) for a user to read the trail.
	Group    = "kplane.dev"
	Resource = "audit"
	// MaxLimit bounds limit=.
	MaxLimit = 100000
)

// Handler serves the trails.
type Handler struct {
	Trails     *Trails
	Authorizer authorizer.Authorizer
	Serializer runtime.NegotiatedSerializer
}

// Filter serves GET /audit of every plane in front of next, and hands
// every request on with its user as authenticated (Authenticator's
// wrapping is only for the audit filter).
func (h *Handler) Filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req = unwrapUser(req)
		if req.URL.Path != Path {
			next.ServeHTTP(w, req)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// ServeHTTP serves GET /audit?since=&limit=&watch= of the request's plane.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	plane, ok := planes.FromContext(ctx)
	if !ok {
		h.writeError(w, req, apierrors.NewInternalError(fmt.Errorf("audit request without a plane")))
		return
	}
	if req.Method != http.MethodGet {
		h.writeError(w, req, apierrors.NewMethodNotSupported(schema.GroupResource{Group: Group, Resource: Resource}, req.Method))
		return
	}
	q, watch, err := parseQuery(req.URL.Query())
	if err != nil {
		h.writeError(w, req, err)
		return
	}
	if err := h.authorize(ctx, plane, watch); err != nil {
		h.writeError(w, req, err)
		return
	}
	uid, _, exists := h.Trails.config.Planes.Lookup(plane)
	if !exists {
		h.writeError(w, req, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: "planes"}, plane))
		return
	}
	tr := h.Trails.trail(plane, uid)
	first := tr.read(q, h.Trails, watch)
	if err := checkCursor(q, first); err != nil {
		h.writeError(w, req, err)
		return
	}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	writeEntries(w, first.entries)
	if watch {
		follow(ctx, w, tr, h.Trails, q, first)
	}
}

// authorize asks the plane's authorization whether the user may get (or
// watch) the plane's audit.
func (h *Handler) authorize(ctx context.Context, plane string, watch bool) error {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return apierrors.NewUnauthorized("no user")
	}
	verb := "get"
	if watch {
		verb = "watch"
	}
	decision, reason, err := h.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: verb, APIGroup: Group, APIVersion: "v1", Resource: Resource, ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	msg := fmt.Sprintf("user %q cannot %s the audit trail of plane %q: the plane's RBAC must allow %q on %q in API group %q",
		u.GetName(), verb, plane, verb, Resource, Group)
	if reason != "" {
		msg += ": " + reason
	}
	if err != nil {
		msg += ": " + err.Error()
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: Resource}, "", fmt.Errorf("%s", msg))
}

// follow writes every new event until the client goes, the plane is
// deleted or the reader falls more than the ring behind.
func follow(ctx context.Context, w http.ResponseWriter, tr *trail, t *Trails, q query, p page) {
	flusher, _ := w.(http.Flusher)
	// Only the first page can be cut short by limit=; every later read
	// takes all that is new.
	cut := q.limit > 0 && len(p.entries) == q.limit
	q.limit = 0
	for {
		if cut {
			q.after = p.entries[len(p.entries)-1].cursor
			cut = false
		} else {
			// Every event up to the newest was sent or left out by a
			// since= time: a first page that sent none must not read as
			// a reader the ring has moved past.
			q.after = max(q.after, p.last)
		}
		if flusher != nil {
			flusher.Flush()
		}
		if p.closed || p.changed == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
		}
		p = tr.read(q, t, true)
		if q.after+1 < p.oldest {
			// The ring moved past what this reader had: it ends, and
			// resuming from its cursor answers 410.
			return
		}
		writeEntries(w, p.entries)
	}
}

func writeEntries(w http.ResponseWriter, entries []entry) {
	for _, e := range entries {
		if _, err := w.Write(e.line); err != nil {
			return
		}
	}
}

// parseQuery reads since= (a cursor, or an RFC 3339 time), limit= and
// watch=; a bad value is a 400 naming its parameter.
func parseQuery(values url.Values) (query, bool, error) {
	var q query
	if since := values.Get("since"); since != "" {
		if cursor, err := strconv.ParseUint(since, 10, 64); err == nil {
			q.after = cursor
		} else if at, err := time.Parse(time.RFC3339Nano, since); err == nil {
			q.from = at
		} else {
			return q, false, badParameter("since", since, "want a cursor (the "+CursorAnnotation+" annotation of an event) or an RFC 3339 time")
		}
	}
	if limit := values.Get("limit"); limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > MaxLimit {
			return q, false, badParameter("limit", limit, fmt.Sprintf("want an integer from 1 to %d", MaxLimit))
		}
		q.limit = n
	}
	watch := false
	if v := values.Get("watch"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return q, false, badParameter("watch", v, "want true or false")
		}
		watch = b
	}
	return q, watch, nil
}

// checkCursor: a cursor older than the ring's oldest event, or newer than
// the trail's newest, cannot be resumed from (events were dropped, or the
// trail is not the one the cursor came from): 410, as an expired watch.
func checkCursor(q query, p page) error {
	if q.after == 0 {
		return nil
	}
	if q.after+1 < p.oldest || q.after > p.last {
		return apierrors.NewResourceExpired(fmt.Sprintf(
			"audit cursor %d is gone: the trail holds %d to %d; read again without since", q.after, p.oldest, p.last))
	}
	return nil
}

func badParameter(name, value, detail string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusBadRequest,
		Reason:  metav1.StatusReasonBadRequest,
		Message: fmt.Sprintf("invalid query parameter %s=%q: %s", name, value, detail),
		Details: &metav1.StatusDetails{
			Group: Group, Kind: Resource,
			Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: name, Message: detail}},
		},
	}}
}

func (h *Handler) writeError(w http.ResponseWriter, req *http.Request, err error) {
	responsewriters.ErrorNegotiated(err, h.Serializer, schema.GroupVersion{Version: "v1"}, w, req)
}
