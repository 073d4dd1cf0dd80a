package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/planes"
)

// AdmittedRecord is the ConfigMap, in the root plane's kube-system, that
// makes --max-planes hold across the servers of one datastore: it names
// the Planes admitted in the last admittedGrace, changed by
// compare-and-swap. A server counts the Planes it knows (its informer)
// and those the record names that it does not know yet, so that two
// servers never both admit the last plane: the second one's swap sees the
// first one's entry.
const AdmittedRecord = "kplane-planes-admitted"

// admittedGrace is how long an entry counts a plane no informer may show
// yet: far longer than a Plane takes to reach every server's informer, so
// an entry is dropped only once its plane is known everywhere (or its
// create failed).
const admittedGrace = 30 * time.Second

// admittedStore is where the record is kept: the root plane's ConfigMaps.
type admittedStore interface {
	GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
		preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error
	ResourcePrefix() string
}

// admitted admits planes against the record.
type admitted struct {
	store admittedStore
	// mu serializes this server's swaps: concurrent ones in one process
	// would only fail each other.
	mu sync.Mutex
	// now is the clock (tests).
	now func() time.Time
}

// admit records plane if fewer than max planes exist (known ones and
// recently admitted ones), and refuses it with 403 otherwise.
func (r *admitted) admit(ctx context.Context, plane string, max int, counter PlaneCounter) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := r.store.ResourcePrefix() + "/kube-system/" + AdmittedRecord
	var refused error
	tryUpdate := func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
		refused = nil
		cm, ok := input.(*api.ConfigMap)
		if !ok {
			return nil, nil, fmt.Errorf("the plane admission record is a %T", input)
		}
		cm = cm.DeepCopy()
		cm.Name, cm.Namespace = AdmittedRecord, "kube-system"
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		now := r.now()
		pending := 0
		for name, at := range cm.Data {
			t, err := time.Parse(time.RFC3339Nano, at)
			if err != nil || now.Sub(t) > admittedGrace {
				delete(cm.Data, name)
				continue
			}
			if !counter.Exists(name) {
				pending++
			}
		}
		_, recorded := cm.Data[plane]
		if !recorded && !counter.Exists(plane) {
			if n := counter.Count() + pending; n >= max {
				refused = apierrors.NewForbidden(planesResource, plane, fmt.Errorf(
					"plane limit reached: %d planes exist or are being created and the server allows %d (--max-planes); delete planes or raise the limit",
					n, max))
				return nil, nil, refused
			}
		}
		cm.Data[plane] = now.UTC().Format(time.RFC3339Nano)
		return cm, nil, nil
	}
	err := r.store.GuaranteedUpdate(planes.WithPlane(ctx, planes.Root), key, &api.ConfigMap{}, true, nil, tryUpdate, nil)
	if refused != nil {
		return refused
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("recording the plane for --max-planes: %w", err))
	}
	return nil
}

// errNothingToForget ends a swap that would change nothing.
var errNothingToForget = errors.New("no entry")

// forget removes plane's entry, so that a plane deleted within
// admittedGrace of its admission frees its place at once.
func (r *admitted) forget(ctx context.Context, plane string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := r.store.ResourcePrefix() + "/kube-system/" + AdmittedRecord
	err := r.store.GuaranteedUpdate(planes.WithPlane(ctx, planes.Root), key, &api.ConfigMap{}, false, nil,
		func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			cm, ok := input.(*api.ConfigMap)
			if !ok || cm.Data[plane] == "" {
				return nil, nil, errNothingToForget
			}
			cm = cm.DeepCopy()
			delete(cm.Data, plane)
			return cm, nil, nil
		}, nil)
	if err != nil && !errors.Is(err, errNothingToForget) && !storage.IsNotFound(err) {
		logrus.WithError(err).WithField("plane", plane).Warn("--max-planes: the deleted plane keeps its place until its entry expires")
	}
}
