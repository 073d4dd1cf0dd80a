package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/loopback"
)

// NoProvisionHeader on a request makes an unknown plane answer 404 instead
// of being provisioned: in-process controllers set it so that work left over
// for a deleted plane never brings it back, and clients may set it to make
// sure they only ever address planes that exist.
const NoProvisionHeader = "X-Kplane-No-Provision"

// DecideAfterResetHeader on a request makes a plane held for a reset
// refuse it (409) instead of letting it wait for the reset's end. The
// in-process controllers set it: what they write was decided on the plane
// before the reset, and would be applied to what the reset made (a
// Deployment controller would add a ReplicaSet of the template the reset
// undid). Refused, they decide again from their informers.
const DecideAfterResetHeader = "X-Kplane-Decide-After-Reset"

// ResetRevisionHeader on a request names the plane's reset revision
// (Manager.ResetRevision) its sender decided it after: once the plane has
// been reset since, the request is refused (409) rather than applied to
// what the reset made. A reset gives back the template's objects with the
// uids the deleted copies had, so neither uid preconditions nor a read
// again tells such a sender that its objects are not the ones it saw.
const ResetRevisionHeader = "X-Kplane-Reset-Revision"

// WithResetRevision returns a copy of ctx whose requests through a routed
// loopback client carry rev, the plane's reset revision
// (Manager.ResetRevision) that what they do was decided after: once the
// plane is reset, they are refused (ResetRevisionHeader).
func WithResetRevision(ctx context.Context, rev uint64) context.Context {
	return loopback.WithRequestHeader(ctx, ResetRevisionHeader, strconv.FormatUint(rev, 10))
}

// probePaths answer for an existing plane without creating one.
var probePaths = []string{"/readyz", "/livez", "/healthz", "/version"}

func isProbe(path string) bool {
	for _, p := range probePaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// Filter runs inside the handler chain, after authentication and
// authorization of the request itself:
//
//   - probes of a plane answer 404 for an unknown plane and, on /readyz,
//     503 until the plane is bootstrapped;
//   - the first request to an unknown plane provisions it when its user may
//     create planes in the root plane, and answers 404 otherwise;
//   - requests to a plane being deleted are refused; watches open in it are
//     ended when the deletion starts;
//   - until every stored Plane is known, only reads of a Ready plane go on
//     at once (the plane was loaded by Loading); the rest wait.
func (m *Manager) Filter(next http.Handler, serializer runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		plane, ok := planes.FromContext(ctx)
		if !ok || plane == planes.Root {
			next.ServeHTTP(w, req)
			return
		}
		if phase, _ := m.Phase(plane); !m.HasSynced() && needsEveryPlane(req, phase) {
			if err := m.WaitForPlanes(ctx); err != nil {
				writeError(w, req, serializer, apierrors.NewServiceUnavailable(err.Error()))
				return
			}
		}
		phase, exists := m.Phase(plane)
		if phase == Terminating {
			phase, exists = m.awaitReleased(ctx, plane, phase, exists)
		}
		if req.URL.Path == ResetPath {
			// Not counted in flight: the reset waits for the plane's other
			// requests.
			m.serveReset(w, req, serializer, plane)
			return
		}
		if isProbe(req.URL.Path) {
			switch {
			case !exists:
				writeError(w, req, serializer, notFound(plane))
			case strings.HasPrefix(req.URL.Path, "/readyz") && phase != Ready:
				http.Error(w, fmt.Sprintf("plane %s is not ready: %s", plane, strings.ToLower(string(phase))), http.StatusServiceUnavailable)
			default:
				next.ServeHTTP(w, req)
			}
			return
		}
		// Entering first means a deletion that starts from here on waits
		// for this request, provisioning and bootstrap included.
		info, _ := request.RequestInfoFrom(ctx)
		tracked, done, entry := m.requests.enter(ctx, plane, info != nil && info.Verb == "watch",
			req.Header.Get(DecideAfterResetHeader) != "")
		switch entry {
		case closedToRequests:
			writeError(w, req, serializer, terminating(plane))
			return
		case heldForReset:
			writeError(w, req, serializer, resetting(plane))
			return
		}
		defer done()
		if seen := req.Header.Get(ResetRevisionHeader); seen != "" && seen != strconv.FormatUint(m.ResetRevision(plane), 10) {
			// Admitted, the request runs before any later reset: the
			// revision it is checked against holds until it ends.
			writeError(w, req, serializer, resetting(plane))
			return
		}
		switch {
		case !exists && req.Header.Get(NoProvisionHeader) != "":
			writeError(w, req, serializer, notFound(plane))
			return
		case !exists:
			u, _ := request.UserFrom(ctx)
			if err := m.Provision(tracked, u, plane); err != nil {
				writeError(w, req, serializer, err)
				return
			}
		case phase == Terminating:
			writeError(w, req, serializer, terminating(plane))
			return
		case phase == Pending:
			if err := m.ensure(tracked, plane); err != nil {
				writeError(w, req, serializer, err)
				return
			}
		}
		next.ServeHTTP(w, req.WithContext(tracked))
	})
}

// releaseWait bounds how long a request waits for the informer to report
// a Plane this server has already released as gone.
const releaseWait = 5 * time.Second

// awaitReleased returns plane's phase once the Plane's deletion, if this
// server has finished it (wiped and released), is known here too. The API
// deletes the Plane when its finalizer is removed, and a client may read
// it gone and use the id at once; until the Plane informer's deletion
// event, the plane is still Terminating here, and the request would be
// refused (409) where it should meet a new plane. A deletion still under
// way, or done by another server, is answered as it stands.
func (m *Manager) awaitReleased(ctx context.Context, plane string, phase Phase, exists bool) (Phase, bool) {
	uid, released := m.released(plane)
	if !released {
		return phase, exists
	}
	_ = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, releaseWait, true, func(context.Context) (bool, error) {
		m.mu.RLock()
		defer m.mu.RUnlock()
		s := m.state[plane]
		return s == nil || s.uid != uid, nil
	})
	return m.Phase(plane)
}

// released returns the uid of plane's Plane when this server has wiped
// the plane for its deletion.
func (m *Manager) released(plane string) (types.UID, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.state[plane]
	if s == nil || !s.terminating || s.wiped == "" || s.wiped != s.uid {
		return "", false
	}
	return s.uid, true
}

// Refused reports whether err is this filter's answer for a plane that is
// being deleted (409) or does not exist (404), both on the planes resource:
// work held for that plane is over.
func Refused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Group == GVR.Group && d.Kind == GVR.Resource
}

func terminating(plane string) error {
	return apierrors.NewConflict(schema.GroupResource{Group: GVR.Group, Resource: GVR.Resource},
		plane, fmt.Errorf("the plane is being deleted"))
}

// resetting is not Refused: the work is not over, only to be decided again.
func resetting(plane string) error {
	return apierrors.NewConflict(schema.GroupResource{Group: GVR.Group, Resource: "resets"},
		plane, fmt.Errorf("the plane is being reset: decide again on what it is after the reset"))
}

func notFound(plane string) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: GVR.Group, Resource: GVR.Resource}, plane)
}

func writeError(w http.ResponseWriter, req *http.Request, serializer runtime.NegotiatedSerializer, err error) {
	if _, ok := err.(apierrors.APIStatus); !ok {
		err = apierrors.NewInternalError(err)
	}
	responsewriters.ErrorNegotiated(err, serializer, schema.GroupVersion{Version: "v1"}, w, req)
}
