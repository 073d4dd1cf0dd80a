package contract

import (
	"bytes"
	"fmt"
	"sort"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"kplane.dev/kplane/manifests"
)

// documentURL names the document inside the compiler; nothing is fetched.
const documentURL = "https://kplane.dev/openapi/kplane.json"

// Document is a compiled contract.
type Document struct {
	raw      map[string]any
	compiler *jsonschema.Compiler

	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema
}

// Embedded compiles the contract built into this binary.
func Embedded() (*Document, error) {
	doc, err := manifests.OpenAPIJSON()
	if err != nil {
		return nil, err
	}
	return Parse(doc)
}

// Parse compiles a contract given as JSON (what GET /openapi/kplane.json
// answers).
func Parse(docJSON []byte) (*Document, error) {
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(docJSON))
	if err != nil {
		return nil, fmt.Errorf("parsing the contract: %w", err)
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the contract is not a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(documentURL, raw); err != nil {
		return nil, fmt.Errorf("loading the contract: %w", err)
	}
	return &Document{raw: m, compiler: c, schemas: map[string]*jsonschema.Schema{}}, nil
}

// SchemaNames lists components.schemas, sorted.
func (d *Document) SchemaNames() []string {
	schemas, _ := d.components("schemas")
	names := make([]string, 0, len(schemas))
	for name := range schemas {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Schema returns the compiled component schema name.
func (d *Document) Schema(name string) (*jsonschema.Schema, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.schemas[name]; ok {
		return s, nil
	}
	if schemas, _ := d.components("schemas"); schemas[name] == nil {
		return nil, fmt.Errorf("the contract has no schema %q", name)
	}
	s, err := d.compiler.Compile(documentURL + "#/components/schemas/" + name)
	if err != nil {
		return nil, fmt.Errorf("compiling schema %s: %w", name, err)
	}
	d.schemas[name] = s
	return s, nil
}

// Validate checks a JSON document against the component schema name.
func (d *Document) Validate(name string, body []byte) error {
	s, err := d.Schema(name)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := s.Validate(v); err != nil {
		// %#v lists every failing keyword with its instance location.
		return fmt.Errorf("does not validate as %s: %#v", name, err)
	}
	return nil
}

// Operation returns paths[path][method] (method in lower case), or nil.
func (d *Document) Operation(path, method string) map[string]any {
	paths, _ := d.raw["paths"].(map[string]any)
	item, _ := paths[path].(map[string]any)
	op, _ := item[method].(map[string]any)
	return op
}

// Properties returns the property names of a component schema and which
// of them are required.
func (d *Document) Properties(name string) (props map[string]bool, err error) {
	schemas, _ := d.components("schemas")
	s, ok := schemas[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the contract has no schema %q", name)
	}
	props = map[string]bool{}
	p, _ := s["properties"].(map[string]any)
	for k := range p {
		props[k] = false
	}
	req, _ := s["required"].([]any)
	for _, k := range req {
		if k, ok := k.(string); ok {
			props[k] = true
		}
	}
	return props, nil
}

func (d *Document) components(kind string) (map[string]any, bool) {
	comps, _ := d.raw["components"].(map[string]any)
	m, ok := comps[kind].(map[string]any)
	return m, ok
}
