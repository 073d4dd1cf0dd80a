package autoapply

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"kplane.dev/kplane/planes"
)

// planeKey is the document-level key that targets a plane.
const planeKey = "plane"

// document is one object of a manifest file and the plane it goes to.
type document struct {
	// index is the position of the document in its file (from 1), for
	// messages.
	index int
	plane string
	obj   *unstructured.Unstructured
}

// parse splits a manifest file into its objects. An error names the
// document it is about; a file with any bad document is not applied at
// all, so that a half-valid file never lands half-way.
func parse(data []byte) ([]document, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []document
	for index := 1; ; index++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", index, err)
		}
		parsed, err := parseDocument(index, raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", index, err)
		}
		docs = append(docs, parsed...)
	}
	return docs, nil
}

func parseDocument(index int, raw []byte) ([]document, error) {
	var content map[string]any
	if err := yaml.Unmarshal(raw, &content); err != nil {
		return nil, err
	}
	if len(content) == 0 {
		// Only comments or whitespace.
		return nil, nil
	}
	obj := &unstructured.Unstructured{Object: content}
	if obj.IsList() {
		return parseList(index, obj)
	}
	d, err := newDocument(index, obj)
	if err != nil {
		return nil, err
	}
	return []document{d}, nil
}

// parseList expands a v1 List; a `plane:` key on the List applies to its
// items unless an item names its own.
func parseList(index int, list *unstructured.Unstructured) ([]document, error) {
	listPlane, err := takePlaneKey(list.Object)
	if err != nil {
		return nil, err
	}
	var docs []document
	items, _, _ := unstructured.NestedSlice(list.Object, "items")
	for i, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("List item %d is not an object", i)
		}
		if listPlane != "" {
			if _, has := m[planeKey]; !has {
				m[planeKey] = listPlane
			}
		}
		d, err := newDocument(index, &unstructured.Unstructured{Object: m})
		if err != nil {
			return nil, fmt.Errorf("List item %d: %w", i, err)
		}
		docs = append(docs, d)
	}
	return docs, nil
}

func newDocument(index int, obj *unstructured.Unstructured) (document, error) {
	plane, err := targetPlane(obj)
	if err != nil {
		return document{}, err
	}
	switch {
	case obj.GetAPIVersion() == "":
		return document{}, fmt.Errorf("apiVersion is missing")
	case obj.GetKind() == "":
		return document{}, fmt.Errorf("kind is missing")
	case obj.GetName() == "":
		return document{}, fmt.Errorf("%s: metadata.name is required (generateName cannot be applied)", obj.GetKind())
	}
	return document{index: index, plane: plane, obj: obj}, nil
}

// targetPlane returns the plane obj goes to and removes what named it.
func targetPlane(obj *unstructured.Unstructured) (string, error) {
	byKey, err := takePlaneKey(obj.Object)
	if err != nil {
		return "", err
	}
	annotations := obj.GetAnnotations()
	byAnnotation, hasAnnotation := annotations[planes.Annotation]
	if hasAnnotation {
		delete(annotations, planes.Annotation)
		if len(annotations) == 0 {
			unstructured.RemoveNestedField(obj.Object, "metadata", "annotations")
		} else {
			obj.SetAnnotations(annotations)
		}
	}
	plane := planes.Root
	switch {
	case byKey != "" && hasAnnotation && byKey != byAnnotation:
		return "", fmt.Errorf("plane: %q and annotation %s: %q disagree", byKey, planes.Annotation, byAnnotation)
	case byKey != "":
		plane = byKey
	case hasAnnotation:
		plane = strings.TrimSpace(byAnnotation)
	}
	if err := planes.ValidateID(plane); err != nil {
		return "", err
	}
	return plane, nil
}

func takePlaneKey(content map[string]any) (string, error) {
	v, ok := content[planeKey]
	if !ok {
		return "", nil
	}
	delete(content, planeKey)
	s, ok := v.(string)
	if !ok || strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("plane: want a plane id, got %v", v)
	}
	return strings.TrimSpace(s), nil
}
