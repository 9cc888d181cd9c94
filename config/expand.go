package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// ${NAME} in the config file.
//
// A field that expands (its file struct field tagged `expand:"env"`: db,
// socket, admin_token, read_token, metrics_token, tls_cert, tls_key,
// kafka.brokers, the values of kafka.properties, every schema_registry
// field, and tables[].catalog) has each ${NAME} replaced by
// the environment variable NAME; an unset NAME, a name that is not one
// ([A-Za-z_][A-Za-z0-9_]*) or a ${ without its } is an error naming the
// variable and the line. In every other field a ${ is refused (the file
// would otherwise say something it does not do: `topic: ${TOPIC}` would be a
// topic named "${TOPIC}"). In every field, $${ is a literal ${.
//
// Expansion happens once, when the file is loaded: a value from the
// environment is not itself expanded again.

// ExpandingFields names the fields that expand ${NAME}, for messages; it
// must match the file struct's `expand:"env"` tags.
const ExpandingFields = "db, socket, admin_token, read_token, metrics_token, tls_cert, tls_key, kafka.brokers, kafka.properties (values), schema_registry.*, tables[].catalog"

// expand replaces ${NAME} with the environment variable NAME and $${ with
// ${. An error names the variable, never the value around it (it may be a
// secret).
func (p *parser) expand(s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("${ without a closing } (write $${ for a literal ${)")
			}
			name := s[i+2 : i+2+end]
			if !validEnvName(name) {
				return "", fmt.Errorf("${%s}: not a valid environment variable name (letters, digits and _, not starting with a digit)", name)
			}
			v, ok := p.env(name)
			if !ok {
				return "", fmt.Errorf("environment variable %s is not set (referenced as ${%s})", name, name)
			}
			b.WriteString(v)
			i += 3 + end
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// literal is the value of a field that does not expand: $${ becomes ${,
// and a ${ is an error.
func literal(s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			ref := s[i:]
			if end := strings.IndexByte(ref, '}'); end >= 0 {
				ref = ref[:end+1]
			} else {
				ref = "${"
			}
			return "", fmt.Errorf("%s: this field does not expand ${NAME} (only %s do); write $${ for a literal ${", ref, ExpandingFields)
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r != '_' && !(r >= 'A' && r <= 'Z') && !(r >= 'a' && r <= 'z') && !(i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// literals applies literal to every string of the decoded file that does
// not expand (fields tagged `expand:"env"` are left to build, which
// expands them; map keys are always literal), in place. An error names the
// field and its line.
func (p *parser) literals(f *file) error {
	return p.walkLiterals(reflect.ValueOf(f).Elem(), nil, "")
}

func (p *parser) walkLiterals(v reflect.Value, path []string, field string) error {
	switch v.Kind() {
	case reflect.String:
		s, err := literal(v.String())
		if err != nil {
			return p.errorf(p.line(path...), field, "%v", err)
		}
		v.SetString(s)
	case reflect.Pointer:
		if !v.IsNil() {
			return p.walkLiterals(v.Elem(), path, field)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			if err := p.walkLiterals(v.Index(i), append(path, strconv.Itoa(i)), fmt.Sprintf("%s[%d]", field, i)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			sub := name
			if field != "" {
				sub = field + "." + name
			}
			next := append(path[:len(path):len(path)], name)
			if name == "" {
				// A field of a format type's own (filePartitions.Text)
				// is its parent's value.
				sub, next = field, path
			}
			if sf.Tag.Get("expand") == "env" {
				// The values expand (in build); a map's keys do not.
				if sf.Type.Kind() == reflect.Map {
					if err := p.literalKeys(v.Field(i), next, sub); err != nil {
						return err
					}
				}
				continue
			}
			if err := p.walkLiterals(v.Field(i), next, sub); err != nil {
				return err
			}
		}
	case reflect.Map:
		if err := p.literalKeys(v, path, field); err != nil {
			return err
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			if err := p.walkLiterals(e, append(path[:len(path):len(path)], k.String()), field+"."+k.String()); err != nil {
				return err
			}
			v.SetMapIndex(k, e)
		}
	}
	return nil
}

// literalKeys applies literal to the keys of a map[string]T.
func (p *parser) literalKeys(m reflect.Value, path []string, field string) error {
	for _, k := range m.MapKeys() {
		s, err := literal(k.String())
		if err != nil {
			return p.errorf(p.line(append(path[:len(path):len(path)], k.String())...), field, "key %q: %v", k.String(), err)
		}
		if s != k.String() {
			nk := reflect.ValueOf(s)
			if m.MapIndex(nk).IsValid() {
				return p.errorf(p.line(path...), field, "keys %q and %q are the same once $${ is read as ${", k.String(), s)
			}
			m.SetMapIndex(nk, m.MapIndex(k))
			m.SetMapIndex(k, reflect.Value{})
		}
	}
	return nil
}
