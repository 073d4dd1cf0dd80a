package planeclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kplane.dev/kplane/planes/lifecycle"
)

// planeDeleted adds the NamespaceTerminating cause to the lifecycle's
// refusal of a write to a plane being deleted (409) or already gone (404:
// a controller's write that comes after the server forgot the plane). The controllers see
// the plane folded into the namespace, and to them that namespace is going
// away. Upstream's controllers give up a create in a terminating namespace
// at once (the ReplicaSet and Job controllers), and event recorders drop
// such an event quietly; the bare 409 was retried with back-off and every
// refused event of a deleted plane's workloads was logged as an error.
// Any other answer is returned as it is.
func planeDeleted(resp *http.Response) (*http.Response, error) {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading a refusal: %w", err)
	}
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && status.Kind == "Status" && status.Details != nil &&
		lifecycle.Refused(&apierrors.StatusError{ErrStatus: status}) {
		status.Details.Causes = append(status.Details.Causes, metav1.StatusCause{
			Type: corev1.NamespaceTerminatingCause, Field: "metadata.namespace", Message: status.Message,
		})
		if encoded, err := json.Marshal(status); err == nil {
			body = encoded
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}
