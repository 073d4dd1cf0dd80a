package snapshot

import (
	"bytes"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"

	"kplane.dev/kplane/planes"
)

func configMap(rv, value string) *api.ConfigMap {
	return &api.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "u1", ResourceVersion: rv,
			Annotations:   map[string]string{planes.Annotation: "p1", "keep": "me"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Data: map[string]string{"k": value},
	}
}

// The encoding is the client's view, leaves the cached object as it was,
// and is written again only while the object keeps its resourceVersion.
func TestEncodings(t *testing.T) {
	e := encoder{gv: schema.GroupVersion{Version: "v1"}, scheme: legacyscheme.Scheme}
	kept := newEncodings(1<<20, time.Minute)
	now := time.Now()
	encode := func(obj *api.ConfigMap) string {
		t.Helper()
		var buf bytes.Buffer
		if err := kept.encode(&buf, e, obj, now); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	obj := configMap("5", "a")
	want := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"default","uid":"u1","resourceVersion":"5","annotations":{"keep":"me"}},"data":{"k":"a"}}`
	if got := encode(obj); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if obj.Annotations[planes.Annotation] != "p1" || len(obj.ManagedFields) != 1 {
		t.Fatalf("the cached object was modified: %+v", obj.ObjectMeta)
	}
	// Same resourceVersion: the kept encoding, even if handed another copy.
	if got := encode(configMap("5", "changed-behind-our-back")); got != want {
		t.Fatalf("kept encoding not used: %s", got)
	}
	if got := encode(configMap("6", "b")); got == want || !bytes.Contains([]byte(got), []byte(`"k":"b"`)) {
		t.Fatalf("a new resourceVersion must be encoded anew: %s", got)
	}
	kept.sweep(now.Add(2 * time.Minute))
	if len(kept.entries) != 0 || kept.bytes != 0 {
		t.Fatalf("sweep kept %d entries, %d bytes", len(kept.entries), kept.bytes)
	}
}
