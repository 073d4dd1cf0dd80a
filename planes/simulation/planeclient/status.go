package planeclient

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"

	"k8s.io/utils/lru"
)

// derivedStatusPath matches the status of the resources whose status is
// only an observation of other objects (Deployments, ReplicaSets,
// ReplicationControllers, StatefulSets).
var derivedStatusPath = regexp.MustCompile(`^(/clusters/[^/]+/control-plane)?(/apis/apps/v1/namespaces/[^/]+/(deployments|replicasets|statefulsets)|/api/v1/namespaces/[^/]+/replicationcontrollers)/[^/]+/status$`)

func derivedStatus(req *http.Request) bool {
	return req.Method == http.MethodPut && derivedStatusPath.MatchString(req.URL.Path)
}

// statusWrites remembers, per object, the last derived status this client
// wrote: the resourceVersion the write was sent with and the one it
// produced. The controller's next status write of the object is often
// computed from its informer's copy before that copy has seen the write
// (one controller instance serves every plane, and its informers lag its
// own writes): a write sent with the older resourceVersion is sent with
// the newer one instead (catchUp). Nothing but this write happened
// between the two versions, and it changed the status only, so the
// controller's copy differs from the current object by nothing the new
// status was computed from; any other change since still conflicts. Each
// such write used to cost a conflict, a read and a second write
// (reapplyStatus): once per plane in every Deployment's rollout.
type statusWrites struct {
	written *lru.Cache // plane + path -> statusWrite
}

type statusWrite struct{ from, to string }

// maxStatusWrites bounds what statusWrites keeps: the objects whose
// status was written last, far more than the controllers' informers lag
// behind.
const maxStatusWrites = 4096

func newStatusWrites() *statusWrites { return &statusWrites{written: lru.New(maxStatusWrites)} }

// catchUp returns body with the resourceVersion this client's last write
// of the object produced, when body carries the one that write was sent
// with.
func (w *statusWrites) catchUp(plane, path string, body []byte) []byte {
	v, ok := w.written.Get(plane + path)
	if !ok {
		return body
	}
	last := v.(statusWrite)
	// Most writes carry the newer version already (the informer caught
	// up): a scan tells them apart before any decoding.
	if !bytes.Contains(body, []byte(`"resourceVersion":"`+last.from+`"`)) {
		return body
	}
	var obj map[string]any
	if json.Unmarshal(body, &obj) != nil || resourceVersion(obj) != last.from {
		return body
	}
	setResourceVersion(obj, last.to)
	caught, err := json.Marshal(obj)
	if err != nil {
		return body
	}
	return caught
}

// record notes a successful status write: sent is what was sent, answer
// the object it produced.
func (w *statusWrites) record(plane, path string, sent, answer []byte) {
	from, to := resourceVersionOf(sent), resourceVersionOf(answer)
	if from == "" || to == "" {
		return
	}
	w.written.Add(plane+path, statusWrite{from: from, to: to})
}

// resourceVersionOf reads an encoded object's resourceVersion.
func resourceVersionOf(data []byte) string {
	var obj struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(data, &obj) != nil {
		return ""
	}
	return obj.Metadata.ResourceVersion
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
func (u *unfold) reapplyStatus(req *http.Request, body []byte, conflict *http.Response) (*http.Response, []byte, error) {
	var sent map[string]any
	if json.Unmarshal(body, &sent) != nil {
		return conflict, body, nil
	}
	resp, last := conflict, body
	for attempt := 0; attempt < reapplyStatusAttempts && resp.StatusCode == http.StatusConflict; attempt++ {
		current, ok := u.current(req)
		if !ok || generation(current) != generation(sent) {
			return resp, last, nil
		}
		setResourceVersion(sent, resourceVersion(current))
		again, err := json.Marshal(sent)
		if err != nil {
			return resp, last, nil
		}
		retry := req.Clone(req.Context())
		setBody(retry, again)
		next, err := u.next.RoundTrip(retry)
		if err != nil {
			return resp, last, nil
		}
		drain(resp)
		resp, last = next, again
	}
	return resp, last, nil
}

// current reads the object of a status write.
func (u *unfold) current(req *http.Request) (map[string]any, bool) {
	data, code := u.read(req, "")
	var obj map[string]any
	if code != http.StatusOK || json.Unmarshal(data, &obj) != nil {
		return nil, false
	}
	return obj, true
}

// read GETs path ("": req's own URL) in the plane req was sent to and
// returns the answer's body and code (0: no answer).
func (u *unfold) read(req *http.Request, path string) ([]byte, int) {
	get := req.Clone(req.Context())
	get.Method, get.Body, get.GetBody, get.ContentLength = http.MethodGet, http.NoBody, nil, 0
	get.Header.Del("Content-Type")
	get.Header.Del("Content-Length")
	if path != "" {
		get.URL.Path, get.URL.RawQuery = path, ""
	}
	resp, err := u.next.RoundTrip(get)
	if err != nil {
		return nil, 0
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0
	}
	return data, http.StatusOK
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
