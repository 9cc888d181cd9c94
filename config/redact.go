package config

import (
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// MinRedactedLen is the shortest secret value a Redactor removes from
// text: a shorter one (a one-letter password) would turn every occurrence
// of that letter in every log line into Redacted, and protects nothing
// worth it. Structured output (Properties, Secret) redacts every secret
// whatever its length.
const MinRedactedLen = 4

// Redactor removes known secret values from text on its way out: log
// lines, error messages, anything a process prints on stderr. It is the
// last line of defence behind the typed redaction (Properties, Secret,
// Scrub), for text the program does not shape itself, such as a
// librdkafka error or log line quoting a property's value. A Redactor is
// safe for concurrent use; the zero value is not, use NewRedactor.
type Redactor struct {
	mu       sync.RWMutex
	values   map[string]bool
	replacer *strings.Replacer // nil when there is nothing to replace
}

// NewRedactor returns a Redactor that knows no secret yet.
func NewRedactor() *Redactor { return &Redactor{values: map[string]bool{}} }

// Add makes r remove each value (and its JSON-escaped form, as it appears
// in a JSON log line) from now on. Values shorter than MinRedactedLen are
// ignored.
func (r *Redactor) Add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, v := range values {
		if len(v) < MinRedactedLen || r.values[v] {
			continue
		}
		r.values[v] = true
		changed = true
	}
	if !changed {
		return
	}
	// Longest first, so that a secret containing another is removed whole.
	var forms []string
	for v := range r.values {
		forms = append(forms, v)
		if q, err := json.Marshal(v); err == nil {
			if esc := string(q[1 : len(q)-1]); esc != v {
				forms = append(forms, esc)
			}
		}
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Redacted)
	}
	r.replacer = strings.NewReplacer(pairs...)
}

// AddProperties adds the values of props whose key names a secret
// (IsSecretKey).
func (r *Redactor) AddProperties(props map[string]string) {
	for k, v := range props {
		if IsSecretKey(k) {
			r.Add(v)
		}
	}
}

// String returns s with every known secret replaced by Redacted.
func (r *Redactor) String(s string) string {
	r.mu.RLock()
	rep := r.replacer
	r.mu.RUnlock()
	if rep == nil {
		return s
	}
	return rep.Replace(s)
}

// Error returns err with every known secret removed from its message; it
// unwraps to err, so errors.Is and errors.As classify it as before.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if out := r.String(msg); out != msg {
		return &scrubbedError{msg: out, err: err}
	}
	return err
}

// Writer returns a writer that redacts each Write before passing it to w.
// Each Write is redacted on its own: a secret split across two writes is
// not found, so it suits writers that get whole lines or records per
// Write (zerolog writes one event per Write).
func (r *Redactor) Writer(w io.Writer) io.Writer { return &redactingWriter{r: r, w: w} }

type redactingWriter struct {
	r *Redactor
	w io.Writer
}

func (rw *redactingWriter) Write(p []byte) (int, error) {
	s := string(p)
	out := rw.r.String(s)
	if out == s {
		return rw.w.Write(p)
	}
	if _, err := io.WriteString(rw.w, out); err != nil {
		return 0, err
	}
	// The caller's bytes were all consumed, whatever length they took.
	return len(p), nil
}

// Secrets returns the secret values c holds: every Secret field and every
// secret-named Properties value, wherever they are in the Config (found by
// type, so a section added later opts in by declaring its credentials as
// Secret). Empty values are left out.
func (c *Config) Secrets() []string {
	var out []string
	collectSecrets(reflect.ValueOf(c), &out, 0)
	return out
}

var (
	secretType     = reflect.TypeFor[Secret]()
	propertiesType = reflect.TypeFor[Properties]()
)

// collectSecrets walks v for Secret and Properties values. depth bounds
// the walk (a config is a tree a few levels deep).
func collectSecrets(v reflect.Value, out *[]string, depth int) {
	if depth > 16 || !v.IsValid() {
		return
	}
	switch v.Type() {
	case secretType:
		if s := v.String(); s != "" {
			*out = append(*out, s)
		}
		return
	case propertiesType:
		for _, k := range v.MapKeys() {
			if IsSecretKey(k.String()) {
				if s := v.MapIndex(k).String(); s != "" {
					*out = append(*out, s)
				}
			}
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			collectSecrets(v.Elem(), out, depth+1)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			collectSecrets(v.Field(i), out, depth+1)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			collectSecrets(v.Index(i), out, depth+1)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			collectSecrets(v.MapIndex(k), out, depth+1)
		}
	}
}
