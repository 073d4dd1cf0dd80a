package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/planes"
)

// A plane's deletion must not wipe its objects while another server still
// serves a request to it: the request's write would land after the wipe,
// in a plane that no longer exists, and show up when the id is used again.
// Each server says it is there with a presence Lease (root plane,
// kube-system) and, once a deletion began, says it has finished the
// plane's requests with an annotation on the Plane; the holder of the
// lifecycle wipes once every present server has said so.
const (
	presenceLabel     = "kplane.dev/server-presence"
	presenceNamespace = "kube-system"
	presenceDuration  = 30 * time.Second
	presenceRenew     = 10 * time.Second
	// DrainedAnnotationPrefix followed by a server's key, on a Plane
	// being deleted, names a server that has no request to the plane in
	// flight any more.
	DrainedAnnotationPrefix = "drained.kplane.dev/"
)

var leasesGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// serverKey is a server's name as a Lease name and an annotation name
// part (server names hold colons).
func serverKey(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])[:16]
}

func presenceLeaseName(server string) string { return "kplane-server-" + serverKey(server) }

// runPresence keeps this server's presence Lease fresh until ctx ends, and
// deletes it then: no deletion waits for a server that stopped.
func (m *Manager) runPresence(ctx context.Context) {
	leases := m.client.Resource(leasesGVR).Namespace(presenceNamespace)
	name := presenceLeaseName(m.config.ServerName)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := m.renewPresence(ctx, name); err != nil && ctx.Err() == nil {
			logrus.WithError(err).Debug("renewing this server's presence Lease")
		}
	}, presenceRenew)
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := leases.Delete(stop, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logrus.WithError(err).Debug("deleting this server's presence Lease")
	}
}

func (m *Manager) renewPresence(ctx context.Context, name string) error {
	lease := &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: presenceNamespace, Labels: map[string]string{presenceLabel: "true"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(m.config.ServerName),
			LeaseDurationSeconds: ptr.To(int32(presenceDuration / time.Second)),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(lease)
	if err != nil {
		return err
	}
	_, err = m.client.Resource(leasesGVR).Namespace(presenceNamespace).Apply(ctx, name, &unstructured.Unstructured{Object: obj},
		metav1.ApplyOptions{FieldManager: "kplane-presence", Force: true})
	return err
}

// presentServers returns the other servers whose presence Lease is fresh.
func (m *Manager) presentServers(ctx context.Context) ([]string, error) {
	list, err := m.client.Resource(leasesGVR).Namespace(presenceNamespace).List(ctx,
		metav1.ListOptions{LabelSelector: presenceLabel + "=true"})
	if err != nil {
		return nil, fmt.Errorf("listing the servers' presence Leases: %w", err)
	}
	var out []string
	for _, item := range list.Items {
		var lease coordinationv1.Lease
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &lease); err != nil {
			continue
		}
		s := lease.Spec
		if s.HolderIdentity == nil || *s.HolderIdentity == m.config.ServerName || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
			continue
		}
		if time.Since(s.RenewTime.Time) < time.Duration(*s.LeaseDurationSeconds)*time.Second {
			out = append(out, *s.HolderIdentity)
		}
	}
	return out, nil
}

// undrained returns the present servers that have not said they finished
// plane's requests.
func (m *Manager) undrained(ctx context.Context, plane *unstructured.Unstructured) ([]string, error) {
	if m.config.SoleServer {
		return nil, nil
	}
	present, err := m.presentServers(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, server := range present {
		if plane.GetAnnotations()[DrainedAnnotationPrefix+serverKey(server)] == "" {
			out = append(out, server)
		}
	}
	return out, nil
}

// drainForDeletion refuses the plane's new requests, waits for those in
// flight and says so on the Plane. The lifecycle's holder does it too:
// it does not wait for its own mark, but a holder that loses the
// lifecycle mid-deletion is one of the servers the next holder waits for,
// and without the mark that deletion waited the full drain timeout.
func (m *Manager) drainForDeletion(ctx context.Context, plane string, uid types.UID) {
	_, drained := m.requests.close(plane)
	if !awaitDrained(ctx, plane, drained, "telling the plane's deletion to go on") {
		return
	}
	m.tellPlane(ctx, plane, uid, DrainedAnnotationPrefix+serverKey(m.config.ServerName), m.config.ServerName,
		"telling the plane's deletion this server drained it")
}

// tellPlane sets annotation to value on the Plane, retried with a
// back-off. The uid makes the patch fail (422) on a Plane of the same name
// made after this one.
func (m *Manager) tellPlane(ctx context.Context, plane string, uid types.UID, annotation, value, what string) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid,
		"annotations": map[string]string{annotation: value}}})
	if err != nil {
		return
	}
	err = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 8},
		func(ctx context.Context) (bool, error) {
			_, err := m.planes.Patch(ctx, plane, types.MergePatchType, patch, metav1.PatchOptions{})
			switch {
			case err == nil, apierrors.IsNotFound(err), apierrors.IsInvalid(err):
				return true, nil
			default:
				logrus.WithError(err).WithField("plane", plane).Debug(what)
				return false, nil
			}
		})
	if err != nil && ctx.Err() == nil {
		logrus.WithError(err).WithField("plane", plane).Warn("could not finish " + what)
	}
}

// waitingError says a reconcile waits for something outside this server:
// the plane is looked at again shortly, without a warning.
type waitingError struct{ what string }

func (e waitingError) Error() string { return e.what }

func describeServers(names []string) string { return planes.DescribeNames(names) }
