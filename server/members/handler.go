package members

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kplane.dev/kplane/server/join"
)

// requestTimeout bounds the etcd calls of one request.
const requestTimeout = 10 * time.Second

// Handler serves the join protocol on a member of the cluster.
type Handler struct {
	// Token is the join token; Version this server's kplane version.
	Token, Version string
	// Client reaches the cluster through this server's member.
	Client *clientv3.Client
}

// ServeHTTP routes the requests of a join.
func (h Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !h.authorized(req) {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "the join token is not this kplane's")
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), requestTimeout)
	defer cancel()
	switch {
	case req.URL.Path == CredentialsPath && req.Method == http.MethodGet:
		h.credentials(ctx, w)
	case req.URL.Path == MembersPath && req.Method == http.MethodPost:
		h.add(ctx, w, req)
	case req.URL.Path == PromotePath && req.Method == http.MethodPost:
		h.promote(ctx, w, req)
	case req.URL.Path == MembersPath && req.Method == http.MethodDelete:
		h.removeLearner(ctx, w, req)
	default:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no such join request: "+req.Method+" "+req.URL.Path)
	}
}

func (h Handler) authorized(req *http.Request) bool {
	got := req.Header.Get(TokenHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.Token)) == 1
}

func (h Handler) credentials(ctx context.Context, w http.ResponseWriter) {
	resp, err := h.Client.Get(ctx, join.RecordKey)
	if err != nil {
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "reading the shared credentials: "+err.Error())
		return
	}
	if len(resp.Kvs) == 0 {
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "the shared credentials are not stored yet")
		return
	}
	writeJSON(w, CredentialsResponse{Record: resp.Kvs[0].Value})
}

// add adds the joiner as a learner. A retry of a join whose member never
// started gets that member back; a started member under that peer URL or
// name is refused: it must restart on its data, or be removed first.
func (h Handler) add(ctx context.Context, w http.ResponseWriter, req *http.Request) {
	var ar AddRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 64<<10)).Decode(&ar); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decoding the join request: "+err.Error())
		return
	}
	if !join.Compatible(ar.Version, h.Version) {
		writeStatus(w, http.StatusConflict, metav1.StatusReasonConflict, fmt.Sprintf(
			"this cluster runs kplane %s, the joining server kplane %s: every server must run the same minor version", h.Version, ar.Version))
		return
	}
	if u, err := url.Parse(ar.PeerURL); err != nil || u.Scheme != "https" || u.Host == "" || ar.Name == "" {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("a join needs a name and an https peer URL, got %q and %q", ar.Name, ar.PeerURL))
		return
	}
	list, ok := h.memberList(ctx, w)
	if !ok {
		return
	}
	for _, m := range list.Members {
		if !slices.Contains(m.PeerURLs, ar.PeerURL) && (m.Name != ar.Name || m.Name == "") {
			continue
		}
		if m.Name == "" && slices.Equal(m.PeerURLs, []string{ar.PeerURL}) {
			writeJSON(w, addResponse(m.ID, list.Members))
			return
		}
		writeStatus(w, http.StatusConflict, metav1.StatusReasonAlreadyExists, fmt.Sprintf(
			"member %s (%x, peers at %v) already belongs to the cluster: restart that server on its data dir, or remove the member (etcdctl member remove %x) and empty its data dir before it joins again",
			m.Name, m.ID, m.PeerURLs, m.ID))
		return
	}
	added, err := h.Client.MemberAddAsLearner(ctx, []string{ar.PeerURL})
	if err != nil {
		// One learner at a time (etcd's --max-learners): the joiner retries.
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "adding the member: "+err.Error())
		return
	}
	writeJSON(w, addResponse(added.Member.ID, added.Members))
}

func (h Handler) promote(ctx context.Context, w http.ResponseWriter, req *http.Request) {
	pr, id, ok := decodeMemberID(w, req, "promote")
	if !ok {
		return
	}
	_, err := h.Client.MemberPromote(ctx, id)
	switch {
	case err == nil, errors.Is(err, rpctypes.ErrMemberNotLearner):
		writeJSON(w, PromoteRequest{ID: pr.ID})
	case errors.Is(err, rpctypes.ErrMemberNotFound):
		writeStatus(w, http.StatusGone, metav1.StatusReasonGone, fmt.Sprintf(
			"member %x is not in the cluster (it was removed): empty its data dir and join again", id))
	default:
		// Not caught up yet (etcd's learner-not-ready), or no leader.
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "promoting the member: "+err.Error())
	}
}

// decodeMemberID reads the member ID of a promote or remove request (a
// PromoteRequest), answering 400 itself when it cannot.
func decodeMemberID(w http.ResponseWriter, req *http.Request, what string) (PromoteRequest, uint64, bool) {
	var r PromoteRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 64<<10)).Decode(&r); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decoding the "+what+" request: "+err.Error())
		return r, 0, false
	}
	id, err := strconv.ParseUint(r.ID, 16, 64)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("member ID %q is not hex", r.ID))
		return r, 0, false
	}
	return r, id, true
}

// memberList lists the cluster's members, or answers 503 saying why not.
func (h Handler) memberList(ctx context.Context, w http.ResponseWriter) (*clientv3.MemberListResponse, bool) {
	list, err := h.Client.MemberList(ctx)
	if err != nil {
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "listing the members: "+err.Error())
		return nil, false
	}
	return list, true
}

// removeLearner removes a learner whose join failed, so that it does not
// hold etcd's one learner place; a voting member is refused (removing one
// changes the quorum: that is for the operator, with etcdctl).
func (h Handler) removeLearner(ctx context.Context, w http.ResponseWriter, req *http.Request) {
	rr, id, ok := decodeMemberID(w, req, "remove")
	if !ok {
		return
	}
	list, ok := h.memberList(ctx, w)
	if !ok {
		return
	}
	for _, m := range list.Members {
		if m.ID != id {
			continue
		}
		if !m.IsLearner {
			writeStatus(w, http.StatusConflict, metav1.StatusReasonConflict, fmt.Sprintf(
				"member %x votes: only a learner is removed through a join (etcdctl member remove %x)", id, id))
			return
		}
		if _, err := h.Client.MemberRemove(ctx, id); err != nil {
			writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "removing the learner: "+err.Error())
			return
		}
	}
	writeJSON(w, rr)
}

func addResponse(id uint64, members []*etcdserverpb.Member) AddResponse {
	out := AddResponse{ID: strconv.FormatUint(id, 16)}
	for _, m := range members {
		out.Members = append(out.Members, Member{Name: m.Name, PeerURLs: m.PeerURLs})
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// writeStatus answers with a Kubernetes Status, as the apiserver would.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: message, Reason: reason, Code: int32(code),
	})
}
