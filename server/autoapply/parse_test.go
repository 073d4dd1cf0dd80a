package autoapply

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseTargetsPlanes(t *testing.T) {
	docs, err := parse([]byte(`
# comment only document
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: in-root
---
plane: team-a
apiVersion: v1
kind: ConfigMap
metadata:
  name: by-key
  namespace: apps
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: by-annotation
  annotations:
    kplane.dev/plane: team-b
    keep: "yes"
---
apiVersion: v1
kind: List
plane: team-c
items:
- apiVersion: v1
  kind: Namespace
  metadata:
    name: listed
- apiVersion: v1
  kind: ConfigMap
  plane: team-d
  metadata:
    name: own-plane
---
{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "json", "annotations": {"kplane.dev/plane": "team-e"}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		index             int
		plane, kind, name string
	}
	var out []got
	for _, d := range docs {
		out = append(out, got{d.index, d.plane, d.obj.GetKind(), d.obj.GetName()})
		if _, ok := d.obj.Object["plane"]; ok {
			t.Errorf("%s: plane key not removed", d.obj.GetName())
		}
		if _, ok := d.obj.GetAnnotations()["kplane.dev/plane"]; ok {
			t.Errorf("%s: plane annotation not removed", d.obj.GetName())
		}
	}
	want := []got{
		{2, "root", "ConfigMap", "in-root"},
		{3, "team-a", "ConfigMap", "by-key"},
		{4, "team-b", "ConfigMap", "by-annotation"},
		{5, "team-c", "Namespace", "listed"},
		{5, "team-d", "ConfigMap", "own-plane"},
		{6, "team-e", "Secret", "json"},
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("got  %v\nwant %v", out, want)
	}
	if docs[2].obj.GetAnnotations()["keep"] != "yes" {
		t.Errorf("other annotations must stay: %v", docs[2].obj.GetAnnotations())
	}
	if _, ok := docs[5].obj.Object["metadata"].(map[string]any)["annotations"]; ok {
		t.Errorf("an annotations map left empty by removing the plane annotation must go")
	}
}

func TestParseRejectsBadDocuments(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"invalid plane":  {"plane: Team_A\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "invalid plane id"},
		"disagreeing":    {"plane: a\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, annotations: {kplane.dev/plane: b}}\n", "disagree"},
		"no kind":        {"apiVersion: v1\nmetadata: {name: x}\n", "kind is missing"},
		"no apiVersion":  {"kind: ConfigMap\nmetadata: {name: x}\n", "apiVersion is missing"},
		"generateName":   {"apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: x-}\n", "metadata.name is required"},
		"not yaml":       {"apiVersion: v1\nkind: [unclosed\n", "document 1"},
		"second bad":     {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\nkind: ConfigMap\n", "document 2"},
		"plane not text": {"plane: {a: b}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "want a plane id"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestManifestFiles(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"b.yaml", "a.yml", "c.json", "notes.txt", ".hidden.yaml", "sub/d.yaml", ".git/e.yaml"} {
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files, err := manifestFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, f := range files {
		r, _ := filepath.Rel(dir, f)
		rel = append(rel, r)
	}
	if want := []string{"a.yml", "b.yaml", "c.json", "sub/d.yaml"}; !reflect.DeepEqual(rel, want) {
		t.Fatalf("got %v, want %v", rel, want)
	}
}
