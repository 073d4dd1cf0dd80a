package planeclient

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
)

// derivedStatusPath matches the status of the resources whose status is
// only an observation of other objects (Deployments, ReplicaSets,
// ReplicationControllers, StatefulSets).
var derivedStatusPath = regexp.MustCompile(`^(/clusters/[^/]+/control-plane)?(/apis/apps/v1/namespaces/[^/]+/(deployments|replicasets|statefulsets)|/api/v1/namespaces/[^/]+/replicationcontrollers)/[^/]+/status$`)

func derivedStatus(req *http.Request) bool {
	return req.Method == http.MethodPut && derivedStatusPath.MatchString(req.URL.Path)
}

// reapplyStatusAttempts bounds the re-applications of one status write.
const reapplyStatusAttempts = 3

// reapplyStatus writes a Deployment's or ReplicaSet's status again on top
// of the current object when the write conflicted but the object's spec
// (its generation) is the one the controller looked at. One controller
// instance serves every plane, so its informer lags its own writes more
// often than a single cluster's: the next sync would compute the same
// status from the same objects, and sending the conflict back only puts
// the work item behind the queue's shared retry limit (10/s for all
// planes). A changed spec still answers the conflict.
func (u *unfold) reapplyStatus(req *http.Request, body []byte, conflict *http.Response) (*http.Response, error) {
	var sent map[string]any
	if json.Unmarshal(body, &sent) != nil {
		return conflict, nil
	}
	resp := conflict
	for attempt := 0; attempt < reapplyStatusAttempts && resp.StatusCode == http.StatusConflict; attempt++ {
		current, ok := u.current(req)
		if !ok || generation(current) != generation(sent) {
			return resp, nil
		}
		setResourceVersion(sent, resourceVersion(current))
		again, err := json.Marshal(sent)
		if err != nil {
			return resp, nil
		}
		retry := req.Clone(req.Context())
		setBody(retry, again)
		next, err := u.next.RoundTrip(retry)
		if err != nil {
			return resp, nil
		}
		drain(resp)
		resp = next
	}
	return resp, nil
}

// current reads the object of a status write.
func (u *unfold) current(req *http.Request) (map[string]any, bool) {
	get := req.Clone(req.Context())
	get.Method, get.Body, get.GetBody, get.ContentLength = http.MethodGet, http.NoBody, nil, 0
	get.Header.Del("Content-Type")
	get.Header.Del("Content-Length")
	resp, err := u.next.RoundTrip(get)
	if err != nil {
		return nil, false
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return nil, false
	}
	var obj map[string]any
	data, err := io.ReadAll(resp.Body)
	if err != nil || json.Unmarshal(data, &obj) != nil {
		return nil, false
	}
	return obj, true
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func metadata(obj map[string]any) map[string]any {
	m, _ := obj["metadata"].(map[string]any)
	return m
}

func generation(obj map[string]any) string {
	g, _ := json.Marshal(metadata(obj)["generation"])
	return string(bytes.TrimSpace(g))
}

func resourceVersion(obj map[string]any) string {
	rv, _ := metadata(obj)["resourceVersion"].(string)
	return rv
}

func setResourceVersion(obj map[string]any, rv string) {
	if m := metadata(obj); m != nil {
		m["resourceVersion"] = rv
	}
}
