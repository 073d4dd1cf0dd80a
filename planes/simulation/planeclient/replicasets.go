package planeclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	deploymentutil "k8s.io/kubernetes/pkg/controller/deployment/util"
)

// staleReplicaSet answers the Deployment controller's create of a
// ReplicaSet whose pod template is not its Deployment's any more: the
// controller decided it from an informer copy of the Deployment older
// than the plane. A reset gives a member's Deployment back its template's
// spec under the same uid, and a sync that read the member's changed
// Deployment just before, and the reset's deletion of that spec's
// ReplicaSet, wrote it again just after: the member kept a ReplicaSet
// more than its template, as revision history, for good (a stale update
// or a stale Pod is undone by the next sync; this is not). Nothing on a
// cluster creates a ReplicaSet for a template its Deployment does not
// have, so the create is refused whenever that is so, with the cause
// upstream's controllers take to retry quietly (no event, no status
// condition of a failed create). The create then carries the plane's
// reset revision read before the Deployment: a reset between the read
// and the create refuses it too (lifecycle.ResetRevisionHeader). It
// costs a read of the Deployment per ReplicaSet created: once per
// rollout. nil: the create goes on, also when the Deployment does not
// exist (the API answers the create as it would).
func (u *unfold) staleReplicaSet(plane string, req *http.Request, body []byte) *http.Response {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/replicasets") {
		return nil
	}
	var rs appsv1.ReplicaSet
	if json.Unmarshal(body, &rs) != nil {
		return nil
	}
	owner := metav1.GetControllerOf(&rs)
	if owner == nil || owner.Kind != "Deployment" || !strings.HasPrefix(owner.APIVersion, appsv1.GroupName+"/") {
		return nil
	}
	u.pinToReset(plane, req)
	d, code := u.deploymentOf(req, owner.Name)
	var why string
	switch {
	case code == http.StatusNotFound:
		return nil
	case code != http.StatusOK:
		// Refused while the plane is reset, or not read at all: nothing
		// says the decision still holds.
		why = fmt.Sprintf("Deployment %s could not be read (HTTP %d); decide again", owner.Name, code)
	case d.UID != owner.UID || !deploymentutil.EqualIgnoreHash(&rs.Spec.Template, &d.Spec.Template):
		why = fmt.Sprintf("the pod template of Deployment %s has changed since it was read; decide again", owner.Name)
	default:
		return nil
	}
	status := apierrors.NewConflict(schema.GroupResource{Group: appsv1.GroupName, Resource: "replicasets"}, rs.Name, errors.New(why)).Status()
	status.Details.Causes = append(status.Details.Causes, metav1.StatusCause{
		Type: corev1.NamespaceTerminatingCause, Message: "a stale decision: retried once the controller's copy is current",
	})
	return statusResponse(req, status)
}

// deploymentOf reads Deployment name of the namespace a ReplicaSet create
// (req, already sent to its plane) is in, and returns the answer's code
// (0: no answer).
func (u *unfold) deploymentOf(req *http.Request, name string) (*appsv1.Deployment, int) {
	data, code := u.read(req, strings.TrimSuffix(req.URL.Path, "/replicasets")+"/deployments/"+name)
	if code != http.StatusOK {
		return nil, code
	}
	var d appsv1.Deployment
	if json.Unmarshal(data, &d) != nil {
		return nil, 0
	}
	return &d, http.StatusOK
}
