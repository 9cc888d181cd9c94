// Positions from the YAML tree. The document is parsed into a yaml.Node
// first; then a walk of that tree against the file's types finds what the
// decoder would refuse (a field the format does not have, a value of the
// wrong kind, a key given twice), taking the line and the field from the
// node and writing the message here. Only then is the tree decoded, which
// can no longer fail but for a case the walk does not know.
//
// Why not the library's messages: its type errors quote the value
// ("cannot unmarshal !!str `hunter2` into ..."), and a secret given where
// a mapping was expected would end up in a log. Its syntax errors name a
// fixed problem of the parser ("did not find expected key") and carry the
// only line there is, so those are kept; any other error of the library
// gets a message of ours without its text.

package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/kmaterialize/kmaterialize/internal/suggest"
)

// yamlLine is the "line N: problem" of a yaml syntax error: the parser
// reports its position only in this text.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError is the *Error for a document yaml cannot parse into a tree:
// the parser's line and problem when it gives a line (the problem is one
// of the parser's fixed descriptions, quoting nothing of the document),
// and otherwise a message of ours without the library's text, which can
// name part of the document (an alias without its anchor).
func (p *parser) syntaxError(err error) *Error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{Path: p.path, Line: line, Msg: "not valid YAML: " + m[2], Err: err}
	}
	return &Error{Path: p.path, Msg: "not valid YAML, at no line the parser names: look for an alias (*name) without its anchor (&name), " +
		"a control character, or a byte that is not UTF-8"}
}

// decodeError is the *Error for a decode of the checked tree that failed
// anyway: the walk (shape) missed a case. The library's message may quote
// a value, so it is neither shown nor kept as the cause.
func (p *parser) decodeError() *Error {
	return &Error{Path: p.path, Msg: "a value does not fit its field (the YAML library's message is not shown: it may quote a value)"}
}

// maxShapeVisits bounds the walk: every alias is walked where it is used,
// so a document of nested aliases (a "billion laughs") would otherwise
// expand without end. A config file is far below it.
const maxShapeVisits = 100_000

// shape walks a document tree against the Go type it decodes into.
type shape struct {
	p       *parser
	visits  int
	inAlias map[*yaml.Node]bool // the anchors whose value is being walked
}

// checkShape reports the first thing in the tree root (the document's top
// mapping) that decoding it into t would refuse, as an *Error with the
// node's line and field; nil when it decodes.
func (p *parser) checkShape(root *yaml.Node, t reflect.Type) *Error {
	s := &shape{p: p, inAlias: map[*yaml.Node]bool{}}
	return s.value(root, t, "")
}

// value checks n, the value of field (a dotted path, "" for the document),
// against t.
func (s *shape) value(n *yaml.Node, t reflect.Type, field string) *Error {
	return s.valueAt(n, n, t, field)
}

// valueAt is value with use the node that puts n there: n itself, or an
// alias of it, where a value of the wrong kind is reported (the field is
// there; the anchor may be anywhere).
func (s *shape) valueAt(use, n *yaml.Node, t reflect.Type, field string) *Error {
	s.visits++
	if s.visits > maxShapeVisits {
		return s.p.errorf(use.Line, field, "the document expands to more than %d values (aliases of aliases?)", maxShapeVisits)
	}
	if n.Kind == yaml.AliasNode {
		target := n.Alias
		if target == nil || s.inAlias[target] {
			return s.p.errorf(use.Line, field, "an alias refers to a value that holds it")
		}
		s.inAlias[target] = true
		defer delete(s.inAlias, target)
		return s.valueAt(use, target, t, field)
	}
	if isNull(n) {
		return nil // every field's zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// A field of the format's own type (partitions:, which is a string
	// or a list) takes the node itself; its errors are ours and quote
	// nothing of the document.
	if u, ok := reflect.New(t).Interface().(yaml.Unmarshaler); ok {
		if err := u.UnmarshalYAML(n); err != nil {
			return s.p.errorf(use.Line, field, "%v", err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		if n.Kind != yaml.MappingNode {
			return s.mismatch(use, n, t, field)
		}
		return s.mapping(n, t, field)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return s.mismatch(use, n, t, field)
		}
		for i, e := range n.Content {
			if err := s.value(e, t.Elem(), fmt.Sprintf("%s[%d]", field, i)); err != nil {
				return err
			}
		}
		return nil
	default:
		if n.Kind != yaml.ScalarNode {
			return s.mismatch(use, n, t, field)
		}
		// The library decides what a scalar may become (a number's
		// forms, what a bool accepts); only its verdict is used.
		if n.Decode(reflect.New(t).Interface()) != nil {
			return s.mismatch(use, n, t, field)
		}
		return nil
	}
}

// pair is one key and its value in a mapping, merges followed.
type pair struct {
	key, value *yaml.Node
	name       string // the key as a string
}

// mapping checks the mapping n (its merges followed) against t, a struct
// of the file's format or a map of strings.
func (s *shape) mapping(n *yaml.Node, t reflect.Type, field string) *Error {
	pairs, err := s.pairs(n, field, map[string]bool{})
	if err != nil {
		return err
	}
	for _, kv := range pairs {
		path := kv.name
		if field != "" {
			path = field + "." + kv.name
		}
		var vt reflect.Type
		if t.Kind() == reflect.Struct {
			f, ok := structField(t, kv.name)
			if !ok {
				return &Error{Path: s.p.path, Line: kv.key.Line, Msg: unknownFieldMsg(kv.name, t)}
			}
			vt = f.Type
		} else {
			vt = t.Elem() // a map's values
		}
		if err := s.value(kv.value, vt, path); err != nil {
			return err
		}
	}
	return nil
}

// pairs returns the keys and values of mapping n as decoding sees them:
// its own keys, then those of the mappings it merges (<<: *anchor, or a
// list of them, the first one winning) that it does not set itself. seen
// holds the names already set by the mappings that merge n. A key given
// twice in one mapping is refused, as the decoder does.
func (s *shape) pairs(n *yaml.Node, field string, seen map[string]bool) ([]pair, *Error) {
	var own []pair
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for j := 0; j < i; j += 2 {
			if prev := n.Content[j]; prev.Kind == k.Kind && prev.Value == k.Value {
				return nil, s.p.errorf(k.Line, field, "mapping key %q already defined at line %d", k.Value, prev.Line)
			}
		}
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		key := k
		if key.Kind == yaml.AliasNode && key.Alias != nil {
			key = key.Alias
		}
		var name string
		if key.Kind != yaml.ScalarNode || key.Decode(&name) != nil {
			return nil, s.p.errorf(k.Line, field, "a key must be a name, not %s", nodeKind(key))
		}
		own = append(own, pair{key: k, value: v, name: name})
	}
	var out []pair
	for _, kv := range own {
		if !seen[kv.name] {
			out = append(out, kv)
		}
	}
	for _, kv := range own {
		seen[kv.name] = true
	}
	for _, m := range merges {
		sources := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			sources = m.Content
		}
		for _, src := range sources {
			s.visits++
			if s.visits > maxShapeVisits {
				return nil, s.p.errorf(src.Line, field, "the document expands to more than %d values (aliases of aliases?)", maxShapeVisits)
			}
			target := src
			if src.Kind == yaml.AliasNode {
				target = src.Alias
			}
			if target == nil || target.Kind != yaml.MappingNode {
				return nil, s.p.errorf(src.Line, field, "a merge (<<) takes a mapping or a list of mappings")
			}
			if s.inAlias[target] {
				return nil, s.p.errorf(src.Line, field, "an alias refers to a value that holds it")
			}
			s.inAlias[target] = true
			merged, err := s.pairs(target, field, seen)
			delete(s.inAlias, target)
			if err != nil {
				return nil, err
			}
			out = append(out, merged...)
		}
	}
	return out, nil
}

// mismatch is the *Error for n, which cannot become a t, at the line of
// use (n or its alias), naming what each is and never n's value.
func (s *shape) mismatch(use, n *yaml.Node, t reflect.Type, field string) *Error {
	return s.p.errorf(use.Line, field, "cannot unmarshal %s into %s", nodeKind(n), goKind(t))
}

// isNull reports whether n is a null scalar (~, null or nothing).
func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// nodeKind says what n is, without its value.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "a string"
		case "!!int":
			return "a whole number"
		case "!!float":
			return "a number"
		case "!!bool":
			return "true or false"
		case "!!null":
			return "null"
		case "!!timestamp":
			return "a timestamp"
		case "!!binary":
			return "binary data"
		}
		return "a tagged value"
	}
	return "a value"
}

// goKind says what a field of type t holds, in the document's terms.
func goKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct:
		return "a mapping of fields"
	case reflect.Slice:
		return "a list"
	}
	return t.String()
}

// structField returns the field of struct t that the YAML key name sets.
func structField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlName is the key that sets f: its yaml tag's name, or its name in
// lower case as the library has it; "" for a field the format skips.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	switch name {
	case "-":
		return ""
	case "":
		return strings.ToLower(f.Name)
	}
	return name
}

// unknownFieldMsg is the message for field, unknown in the section of
// type t, with the nearest field that section has.
func unknownFieldMsg(field string, t reflect.Type) string {
	msg := fmt.Sprintf("unknown field %q", field)
	var names []string
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() {
			if name := yamlName(f); name != "" {
				names = append(names, name)
			}
		}
	}
	if near := suggest.Nearest(field, names); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return msg
}
