package limits

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"

	"kplane.dev/kplane/planes/auth"
)

// bucket is a plane's token bucket and the rate it was made for, so that
// a changed limit makes a new one.
type bucket struct {
	limiter *rate.Limiter
	rps     int32
	burst   int32
}

// Filter refuses a request to a plane past its request rate (429 with
// Retry-After) or a watch past its open watches (403). It runs after the
// lifecycle's filter, which counts the request's own watch. The server's
// own in-process clients (controllers) are not limited: their requests are
// the plane's consequences, not its users'.
func (e *Enforcer) Filter(next http.Handler, serializer runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		plane, ok := auth.TenantPlane(ctx)
		if !ok {
			next.ServeHTTP(w, req)
			return
		}
		l := e.Effective(plane)
		if l.IsZero() {
			next.ServeHTTP(w, req)
			return
		}
		if err := e.admitRate(plane, l); err != nil {
			writeError(w, req, serializer, err)
			return
		}
		if info, ok := request.RequestInfoFrom(ctx); ok && info.Verb == "watch" && l.MaxWatches > 0 {
			if _, open := e.Usage(plane); open > int(l.MaxWatches) {
				// open counts this watch too.
				writeError(w, req, serializer, apierrors.NewForbidden(schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}, "",
					fmt.Errorf("exceeded quota: plane %s (Plane.spec.limits), requested: watches=1, used: watches=%d, limited: maxWatches=%d",
						plane, open-1, l.MaxWatches)))
				return
			}
		}
		next.ServeHTTP(w, req)
	})
}

// admitRate takes a token of plane's bucket or says when one will be
// there.
func (e *Enforcer) admitRate(plane string, l Effective) error {
	if l.RequestsPerSecond <= 0 {
		return nil
	}
	e.mu.Lock()
	b := e.rates[plane]
	if b == nil || b.rps != l.RequestsPerSecond || b.burst != l.RequestBurst {
		b = &bucket{limiter: rate.NewLimiter(rate.Limit(l.RequestsPerSecond), int(l.RequestBurst)),
			rps: l.RequestsPerSecond, burst: l.RequestBurst}
		e.rates[plane] = b
	}
	e.mu.Unlock()
	now := time.Now()
	r := b.limiter.ReserveN(now, 1)
	delay := r.DelayFrom(now)
	if delay == 0 {
		return nil
	}
	r.CancelAt(now)
	return apierrors.NewTooManyRequests(fmt.Sprintf(
		"plane %s is over its request rate: limited: requestsPerSecond=%d, requestBurst=%d (Plane.spec.limits); retry after %s",
		plane, l.RequestsPerSecond, l.RequestBurst, delay.Round(time.Millisecond)), int(math.Ceil(delay.Seconds())))
}

func writeError(w http.ResponseWriter, req *http.Request, serializer runtime.NegotiatedSerializer, err error) {
	responsewriters.ErrorNegotiated(err, serializer, schema.GroupVersion{Version: "v1"}, w, req)
}
