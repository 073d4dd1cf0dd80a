package crds

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/munnerz/goautoneg"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"k8s.io/utils/lru"

	"kplane.dev/kplane/planes"
)

// document is a rendered OpenAPI document, shared by every plane whose
// CRDs produce it.
type document struct {
	json     []byte
	etag     string
	modified time.Time

	protoOnce sync.Once
	proto     []byte
	protoErr  error
	toProto   func([]byte) ([]byte, error)
}

func newDocument(data []byte, toProto func([]byte) ([]byte, error)) *document {
	return &document{json: data, etag: fmt.Sprintf("%X", sha512.Sum512(data)), modified: time.Now(), toProto: toProto}
}

func (d *document) protobuf() ([]byte, error) {
	d.protoOnce.Do(func() { d.proto, d.protoErr = d.toProto(d.json) })
	return d.proto, d.protoErr
}

// openapiCache serves /openapi/v2 and /openapi/v3 per plane: the built-in
// documents plus the plane's CRDs. Documents are keyed by the content of
// the CRDs they are made of, so identical planes share them.
type openapiCache struct {
	index *Index
	// staticV2 is the server's own v2 spec (available once it runs).
	staticV2 func() *spec.Swagger

	// mu makes building a missing document happen once.
	mu sync.Mutex
	// Documents are keyed by content, not by plane, so a deleted plane
	// leaves nothing of its own here; the caches are bounded so that CRD
	// churn (every distinct set of CRDs is a new key) cannot grow them.
	// v3 documents by group-version and CRD contents.
	v3 *lru.Cache
	// v2 documents by the CRD contents of a plane (few distinct sets).
	v2 *lru.Cache
	// keysOf lists the cached documents built from a CRD content, so that
	// a content no plane uses anymore takes its documents with it.
	keysOf map[string]sets.Set[string]
}

// Bounds of the document caches: a document of a few CRDs is tens of KiB,
// v2 documents hold the whole built-in API (a few MiB).
const (
	maxV3Documents = 128
	maxV2Documents = 8
)

func newOpenAPICache(index *Index) *openapiCache {
	return &openapiCache{index: index, v3: lru.New(maxV3Documents), v2: lru.New(maxV2Documents), keysOf: map[string]sets.Set[string]{}}
}

// forgetContent drops the documents built from a CRD content no plane
// uses anymore.
func (o *openapiCache) forgetContent(hash string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key := range o.keysOf[hash] {
		o.v3.Remove(key)
		o.v2.Remove(key)
	}
	delete(o.keysOf, hash)
}

// remember notes that key was built from entries.
func (o *openapiCache) rememberLocked(key string, entries []*entry) {
	for _, e := range entries {
		if o.keysOf[e.hash] == nil {
			o.keysOf[e.hash] = sets.New[string]()
		}
		o.keysOf[e.hash].Insert(key)
	}
}

// serve answers /openapi/* for plane.
func (o *openapiCache) serve(w http.ResponseWriter, req *http.Request, next http.Handler, plane string) {
	path := strings.TrimSuffix(req.URL.Path, "/")
	switch {
	case path == "/openapi/v3":
		o.serveV3Index(w, req, next, plane)
	case strings.HasPrefix(path, "/openapi/v3/apis/"):
		gv := strings.SplitN(strings.TrimPrefix(path, "/openapi/v3/apis/"), "/", 2)
		if len(gv) == 2 {
			if doc := o.v3Document(plane, schema.GroupVersion{Group: gv[0], Version: gv[1]}); doc != nil {
				serveDocument(w, req, doc, "application/com.github.proto-openapi.spec.v3.v1.0+protobuf")
				return
			}
		}
		next.ServeHTTP(w, req)
	case path == "/openapi/v2" && o.index.HasAny(plane) && o.staticV2 != nil && o.staticV2() != nil:
		doc, err := o.v2Document(plane)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		serveDocument(w, req, doc, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
	default:
		next.ServeHTTP(w, req)
	}
}

// crdVersionsOf returns the established CRDs of plane serving gv.
func (o *openapiCache) crdVersionsOf(plane string, gv schema.GroupVersion) []*entry {
	entries, _ := o.index.List(plane)
	var out []*entry
	for _, e := range entries {
		if e.crd.Spec.Group != gv.Group || !apihelpers.IsCRDConditionTrue(e.crd, apiextensionsv1.Established) {
			continue
		}
		if apihelpers.HasServedCRDVersion(e.crd, gv.Version) {
			out = append(out, e)
		}
	}
	return out
}

func (o *openapiCache) v3Document(plane string, gv schema.GroupVersion) *document {
	entries := o.crdVersionsOf(plane, gv)
	if len(entries) == 0 {
		return nil
	}
	key := gv.String()
	for _, e := range entries {
		key += "|" + e.hash
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if doc, ok := o.v3.Get(key); ok {
		return doc.(*document)
	}
	var specs []*spec3.OpenAPI
	for _, e := range entries {
		s, err := builder.BuildOpenAPIV3(e.crd, gv.Version, builder.Options{V2: false, IncludeSelectableFields: true})
		if err != nil {
			continue
		}
		specs = append(specs, s)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil
	}
	data, err := json.Marshal(merged)
	if err != nil {
		return nil
	}
	doc := newDocument(data, handler3.ToV3ProtoBinary)
	o.v3.Add(key, doc)
	o.rememberLocked(key, entries)
	return doc
}

func (o *openapiCache) v2Document(plane string) (*document, error) {
	entries, _ := o.index.List(plane)
	key := ""
	var established []*entry
	for _, e := range entries {
		if apihelpers.IsCRDConditionTrue(e.crd, apiextensionsv1.Established) {
			established = append(established, e)
			key += e.hash + "|"
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if doc, ok := o.v2.Get(key); ok {
		return doc.(*document), nil
	}
	var specs []*spec.Swagger
	for _, e := range established {
		for _, v := range servedVersions(e.crd) {
			s, err := builder.BuildOpenAPIV2(e.crd, v, builder.Options{V2: true, IncludeSelectableFields: true})
			if err != nil {
				continue
			}
			specs = append(specs, s)
		}
	}
	merged, err := builder.MergeSpecs(o.staticV2(), specs...)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}
	doc := newDocument(data, handler.ToProtoBinary)
	o.v2.Add(key, doc)
	o.rememberLocked(key, established)
	return doc, nil
}

// serveV3Index lists the plane's group-versions. Every URL in it carries the
// plane's path prefix: clients fetch them as absolute paths.
func (o *openapiCache) serveV3Index(w http.ResponseWriter, req *http.Request, next http.Handler, plane string) {
	if plane == planes.Root && !o.index.HasAny(plane) {
		next.ServeHTTP(w, req)
		return
	}
	r := req.Clone(req.Context())
	r.Header.Del("If-None-Match")
	r.Header.Del("Accept-Encoding")
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		copyResponse(w, rec)
		return
	}
	var index handler3.OpenAPIV3Discovery
	if err := json.Unmarshal(rec.Body.Bytes(), &index); err != nil {
		copyResponse(w, rec)
		return
	}
	prefix := planes.Path(plane)
	for gv, p := range index.Paths {
		index.Paths[gv] = handler3.OpenAPIV3DiscoveryGroupVersion{ServerRelativeURL: prefix + p.ServerRelativeURL}
	}
	entries, _ := o.index.List(plane)
	gvs := map[schema.GroupVersion]bool{}
	for _, e := range entries {
		for _, v := range servedVersions(e.crd) {
			gvs[schema.GroupVersion{Group: e.crd.Spec.Group, Version: v}] = true
		}
	}
	for gv := range gvs {
		if doc := o.v3Document(plane, gv); doc != nil {
			index.Paths["apis/"+gv.String()] = handler3.OpenAPIV3DiscoveryGroupVersion{
				ServerRelativeURL: prefix + "/openapi/v3/apis/" + gv.String() + "?hash=" + doc.etag}
		}
	}
	data, err := json.Marshal(index)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeRaw(w, "application/json", data)
}

func serveDocument(w http.ResponseWriter, req *http.Request, doc *document, protoType string) {
	accept := req.Header.Get("Accept")
	if accept == "" {
		accept = "*/*"
	}
	w.Header().Add("Vary", "Accept")
	for _, clause := range goautoneg.ParseAccept(accept) {
		data, contentType := doc.json, "application/json"
		switch {
		case clause.Type == "application" && strings.Contains(clause.SubType, "protobuf"):
			proto, err := doc.protobuf()
			if err != nil {
				continue
			}
			data, contentType = proto, protoType
		case clause.Type == "application" && clause.SubType == "json", clause.Type == "*", clause.Type == "application" && clause.SubType == "*":
		default:
			continue
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Etag", `"`+doc.etag+`"`)
		http.ServeContent(w, req, "", doc.modified, bytes.NewReader(data))
		return
	}
	w.WriteHeader(http.StatusNotAcceptable)
}

func writeRaw(w http.ResponseWriter, contentType string, data []byte) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}
