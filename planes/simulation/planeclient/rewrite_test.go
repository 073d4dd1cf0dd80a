package planeclient

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// treeRewrite is what rewrite must do, written the plain way: decode the
// whole document, change the strings, encode it again. The scanner is
// checked against it.
func treeRewrite(t testing.TB, doc []byte, f func(string) string) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("reference decode: %v", err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				switch s, isString := child.(string); {
				case opaque[k]:
				case isString && (k == "namespace" || k == "nodeName"):
					v[k] = f(s)
				case k == "matchFields":
					terms, _ := child.([]any)
					for _, term := range terms {
						term, _ := term.(map[string]any)
						if term["key"] != metav1.ObjectNameField {
							continue
						}
						values, _ := term["values"].([]any)
						for i, name := range values {
							if name, ok := name.(string); ok {
								values[i] = f(name)
							}
						}
					}
				default:
					walk(child)
				}
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(v)
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	decode := func(doc []byte) any {
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decoding %s: %v", doc, err)
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}

func strip(s string) string {
	if _, rest, ok := strings.Cut(s, "|"); ok {
		return rest
	}
	return s
}

func fold(s string) string { return "p|" + s }

// rewriteCorpus are bodies the workload controllers send and receive.
func rewriteCorpus(t testing.TB) [][]byte {
	t.Helper()
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "p|default", ResourceVersion: "18446744073709551615",
			Labels:          map[string]string{"namespace": "p|x", "app": "web"},
			Annotations:     map[string]string{"spec": `{"nodeName":"p|n","namespace":"p|y"}`, "quote\"d": "tab\there <&>"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "u"}}},
		Spec: corev1.PodSpec{NodeName: "p|kplane-node-0", NodeSelector: map[string]string{"nodeName": "p|kept"},
			Containers: []corev1.Container{{Name: "c", Image: "nginx", Env: []corev1.EnvVar{{Name: "NS",
				ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
					{Values: []string{"p|kplane-node-1"}, Operator: corev1.NodeSelectorOpIn, Key: metav1.ObjectNameField},
					{Key: "spec.other", Operator: corev1.NodeSelectorOpIn, Values: []string{"p|kept"}}}}}}},
				PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey: "zone", Namespaces: []string{"p|other"},
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"namespace": "p|z"}}}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "p|default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "p|default", Name: "web-1"}, Count: 3, Message: "ünïcode \u2028"}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "p|default"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sa", Namespace: "p|kube-system"}}}
	list := &corev1.PodList{Items: []corev1.Pod{*pod, *pod}}
	var corpus [][]byte
	for _, obj := range []any{pod, event, binding, list, metav1.Status{Status: "Failure", Code: 409}} {
		doc, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		corpus = append(corpus, doc)
	}
	return append(corpus,
		[]byte(` { "metadata" : { "namespace" : "p|de\u0066ault" } , "n": -1.5e+300, "z": [ ], "o": { }, "t": true, "f": false, "x": null } `),
		[]byte(`{"namespace":{"namespace":"p|nested"},"nodeName":7,"items":[[{"namespace":"p|deep"}]]}`),
		[]byte(`{"namespace":"p|a","namespace":"p|b"}`),
		[]byte(`{"matchFields":"not terms","data":{"namespace":"p|kept"}}`),
		[]byte(`"just a string"`),
		[]byte(`[{"nodeName":"p|n1"},{"nodeName":""}]`),
	)
}

func TestRewriteMatchesTheDecodedWalk(t *testing.T) {
	for _, f := range []func(string) string{strip, fold} {
		for _, doc := range rewriteCorpus(t) {
			got, err := rewrite(io.NopCloser(bytes.NewReader(doc)), f)
			if err != nil {
				t.Fatal(err)
			}
			if want := treeRewrite(t, doc, f); !sameJSON(t, got, want) {
				t.Errorf("rewrite of\n%s\ngave\n%s\nwant\n%s", doc, got, want)
			}
		}
	}
}

func TestRewriteLeavesWhatIsNotJSON(t *testing.T) {
	for _, doc := range []string{`{`, `{"namespace":"p|a"`, `{"namespace":}`, `[1,]`, `{"a" 1}`, `{"namespace":"p|a"} trailing`,
		`{"namespace":"unterminated}`, strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), "  \n"} {
		got, err := rewrite(io.NopCloser(strings.NewReader(doc)), strip)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != doc {
			t.Errorf("rewrite changed %.40q into %.40q", doc, got)
		}
	}
}

func FuzzRewrite(f *testing.F) {
	for _, doc := range rewriteCorpus(f) {
		f.Add(doc)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got, err := rewrite(io.NopCloser(bytes.NewReader(doc)), strip)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(doc) {
			return
		}
		if want := treeRewrite(t, doc, strip); !sameJSON(t, got, want) {
			t.Errorf("rewrite of %s gave %s, want %s", doc, got, want)
		}
	})
}
