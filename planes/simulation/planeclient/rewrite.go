package planeclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rewrite applies f to every namespace and node name of a JSON body: the
// string values of "namespace" and "nodeName" keys at any depth, and the
// node names a node selector's matchFields hold, but nothing inside the
// maps of user keys (opaque). A body that is not one JSON document is
// returned as it is, for the server to judge.
//
// It scans the body's bytes and copies them, replacing only those strings:
// decoding every request and answer of the workload controllers into
// map[string]any and encoding it again took 4 % of a busy server's CPU
// (1,000 planes rolling out a Deployment each) and as much again in the
// garbage it left.
func rewrite(r io.ReadCloser, f func(string) string) ([]byte, error) {
	defer r.Close()
	raw, err := io.ReadAll(r)
	if err != nil {
		return raw, err
	}
	return rewriteBytes(raw, f), nil
}

// rewriteBytes is rewrite of a body already read; raw itself when nothing
// changes.
func rewriteBytes(raw []byte, f func(string) string) []byte {
	if len(bytes.TrimSpace(raw)) == 0 {
		return raw
	}
	s := &scanner{in: raw, f: f}
	if err := s.document(); err != nil {
		return raw
	}
	if s.out == nil {
		return raw
	}
	return append(s.out, raw[s.last:]...)
}

// opaque maps hold user keys, never object references.
var opaque = map[string]bool{
	"labels": true, "annotations": true, "matchLabels": true, "selector": true,
	"nodeSelector": true, "data": true, "stringData": true, "binaryData": true,
}

// errSyntax ends a scan of a body that is not JSON.
var errSyntax = errors.New("not a JSON document")

// maxDepth bounds the nesting the scanner follows, as encoding/json does.
const maxDepth = 10000

// scanner walks one JSON document. out holds the input up to last with
// the replaced strings in place; the rest of the input follows unchanged.
type scanner struct {
	in    []byte
	pos   int
	out   []byte
	last  int
	depth int
	// frozen counts the opaque values being scanned: nothing in them is
	// rewritten.
	frozen int
	f      func(string) string
}

func (s *scanner) document() error {
	if err := s.value(); err != nil {
		return err
	}
	s.space()
	if s.pos != len(s.in) {
		return errSyntax
	}
	return nil
}

func (s *scanner) space() {
	for s.pos < len(s.in) {
		switch s.in[s.pos] {
		case ' ', '\t', '\r', '\n':
			s.pos++
		default:
			return
		}
	}
}

// value scans the value at pos, rewriting inside it.
func (s *scanner) value() error {
	s.space()
	if s.pos >= len(s.in) {
		return errSyntax
	}
	switch s.in[s.pos] {
	case '{':
		return s.object()
	case '[':
		return s.array()
	case '"':
		_, err := s.str()
		return err
	default:
		return s.literal()
	}
}

// container scans an object or array: element for each of its members,
// separated by commas, up to close.
func (s *scanner) container(close byte, element func() error) error {
	if s.depth++; s.depth > maxDepth {
		return errSyntax
	}
	s.pos++ // { or [
	s.space()
	if s.pos < len(s.in) && s.in[s.pos] == close {
		s.pos++
		s.depth--
		return nil
	}
	for {
		if err := element(); err != nil {
			return err
		}
		s.space()
		switch {
		case s.pos >= len(s.in):
			return errSyntax
		case s.in[s.pos] == ',':
			s.pos++
		case s.in[s.pos] == close:
			s.pos++
			s.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

func (s *scanner) object() error {
	return s.container('}', func() error {
		s.space()
		if s.pos >= len(s.in) || s.in[s.pos] != '"' {
			return errSyntax
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		s.space()
		if s.pos >= len(s.in) || s.in[s.pos] != ':' {
			return errSyntax
		}
		s.pos++
		return s.member(key)
	})
}

func (s *scanner) array() error { return s.container(']', s.value) }

// member scans the value of key in an object.
func (s *scanner) member(key string) error {
	s.space()
	switch {
	case s.frozen > 0:
	case opaque[key]:
		return s.skip()
	case key == "namespace" || key == "nodeName":
		if s.pos < len(s.in) && s.in[s.pos] == '"' {
			start := s.pos
			v, err := s.str()
			if err != nil {
				return err
			}
			s.replace(start, s.pos, quote(s.f(v)))
			return nil
		}
	case key == "matchFields":
		return s.matchFields()
	}
	return s.value()
}

// str scans the string at pos and returns its value.
func (s *scanner) str() (string, error) {
	start := s.pos
	s.pos++ // "
	escaped := false
	for s.pos < len(s.in) {
		switch s.in[s.pos] {
		case '\\':
			escaped = true
			s.pos += 2
		case '"':
			s.pos++
			if !escaped {
				return string(s.in[start+1 : s.pos-1]), nil
			}
			var value string
			if err := json.Unmarshal(s.in[start:s.pos], &value); err != nil {
				return "", errSyntax
			}
			return value, nil
		default:
			s.pos++
		}
	}
	return "", errSyntax
}

// literal scans a number, true, false or null; the server judges its form.
func (s *scanner) literal() error {
	start := s.pos
	for s.pos < len(s.in) {
		switch s.in[s.pos] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			if s.pos == start {
				return errSyntax
			}
			return nil
		case '{', '[', '"', ':':
			return errSyntax
		}
		s.pos++
	}
	if s.pos == start {
		return errSyntax
	}
	return nil
}

// skip scans the value at pos without rewriting anything in it.
func (s *scanner) skip() error {
	s.frozen++
	defer func() { s.frozen-- }()
	return s.value()
}

// matchFields rewrites the node names of a node selector's matchFields:
// the values of its terms whose key is metadata.name. A term's key may
// follow its values, so the (small) array is decoded whole.
func (s *scanner) matchFields() error {
	start := s.pos
	if err := s.skip(); err != nil {
		return err
	}
	var terms []map[string]any
	dec := json.NewDecoder(bytes.NewReader(s.in[start:s.pos]))
	dec.UseNumber()
	if err := dec.Decode(&terms); err != nil {
		// Not a list of terms: nothing in it to rewrite.
		return nil
	}
	changed := false
	for _, term := range terms {
		if term["key"] != metav1.ObjectNameField {
			continue
		}
		values, _ := term["values"].([]any)
		for i, v := range values {
			if name, ok := v.(string); ok {
				values[i] = s.f(name)
				changed = true
			}
		}
	}
	if !changed {
		return nil
	}
	encoded, err := json.Marshal(terms)
	if err != nil {
		return err
	}
	s.replace(start, s.pos, encoded)
	return nil
}

// replace puts with in place of the input from start to end.
func (s *scanner) replace(start, end int, with []byte) {
	if s.out == nil {
		s.out = make([]byte, 0, len(s.in)+64)
	}
	s.out = append(s.out, s.in[s.last:start]...)
	s.out = append(s.out, with...)
	s.last = end
}

// quote is v as a JSON string.
func quote(v string) []byte {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			encoded, _ := json.Marshal(v)
			return encoded
		}
	}
	out := make([]byte, 0, len(v)+2)
	out = append(out, '"')
	out = append(out, v...)
	return append(out, '"')
}
