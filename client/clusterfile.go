package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The cluster file: the daemons of a cluster, for `kmaterialize get
// --cluster FILE` and the other commands that read through a cluster
// (docs/shards.md, "Cluster client"):
//
//	daemons:
//	  - name: shard-a                     # optional: what messages call it
//	    address: http://10.0.0.2:9466     # a TCP listener's URL ...
//	    token_file: /etc/kmaterialize/read-token
//	  - address: /run/kmaterialize/tables.db.sock   # ... or a unix socket
//
// A token (token: or token_file:, the file's content without its
// trailing blanks) goes with a URL only. Relative socket paths and token
// files are relative to the cluster file's directory.

// ClusterFileDaemon is one entry of a cluster file, as written.
type ClusterFileDaemon struct {
	Name, Address, Token, TokenFile string
	// Line is the entry's line in the file.
	Line int
}

// ClusterFileError is a cluster file that cannot be used: its path, the
// line at fault (0: the whole file) and what is wrong. A token's value is
// never in it.
type ClusterFileError struct {
	Path string
	Line int
	Msg  string
}

func (e *ClusterFileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("cluster file %s:%d: %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("cluster file %s: %s", e.Path, e.Msg)
}

// maxClusterFile bounds the file LoadClusterFile reads: a list of daemons
// is far below it.
const maxClusterFile = 1 << 20

// LoadClusterFile reads the cluster file at path and returns its daemons
// for NewCluster, token files read and relative paths resolved.
func LoadClusterFile(path string) ([]ClusterDaemon, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cluster file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxClusterFile+1))
	if err != nil {
		return nil, fmt.Errorf("cluster file %s: %w", path, err)
	}
	if len(data) > maxClusterFile {
		return nil, &ClusterFileError{Path: path, Msg: fmt.Sprintf("larger than %d bytes", maxClusterFile)}
	}
	entries, err := ParseClusterFile(path, data)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	out := make([]ClusterDaemon, len(entries))
	for i, e := range entries {
		d := ClusterDaemon{Name: e.Name, Address: e.Address, Token: e.Token}
		if !isURL(d.Address) && !filepath.IsAbs(d.Address) {
			d.Address = filepath.Join(dir, d.Address)
		}
		if e.TokenFile != "" {
			tf := e.TokenFile
			if !filepath.IsAbs(tf) {
				tf = filepath.Join(dir, tf)
			}
			b, err := os.ReadFile(tf)
			if err != nil {
				return nil, &ClusterFileError{Path: path, Line: e.Line, Msg: fmt.Sprintf("token_file: %v", err)}
			}
			d.Token = strings.TrimRight(string(b), " \t\r\n")
			if msg := checkToken(d.Token); msg != "" {
				return nil, &ClusterFileError{Path: path, Line: e.Line, Msg: fmt.Sprintf("token_file %s: %s", tf, msg)}
			}
		}
		out[i] = d
	}
	return out, nil
}

// yamlSyntax is the "line N: problem" of a yaml syntax error: the parser
// names the line only in its text (its problems are fixed descriptions,
// quoting nothing of the document).
var yamlSyntax = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// The fields of an entry.
var clusterFields = []string{"name", "address", "token", "token_file"}

// ParseClusterFile reads a cluster file's text (path is for messages
// only): a mapping with one key, daemons, a list of at least one entry of
// name (optional), address, and token or token_file (optional, not both,
// with a URL only). Names and addresses are unique. Aliases and more than
// one document are refused. Every error is a *ClusterFileError naming the
// line.
func ParseClusterFile(path string, data []byte) ([]ClusterFileDaemon, error) {
	fail := func(line int, format string, args ...any) error {
		return &ClusterFileError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fail(0, "empty: want a list of daemons (daemons: - address: ...)")
		}
		if m := yamlSyntax.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			return nil, fail(line, "not valid YAML: %s", m[2])
		}
		return nil, fail(0, "not valid YAML (look for a control character or a byte that is not UTF-8)")
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fail(extra.Line, "more than one YAML document: a cluster file is one")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, fail(root.Line, "want a mapping with daemons: (a list of daemons), not %s", kindOf(root))
	}
	pairs, err := mappingPairs(root, fail)
	if err != nil {
		return nil, err
	}
	var list *yaml.Node
	for _, kv := range pairs {
		if kv.name != "daemons" {
			return nil, fail(kv.key.Line, "unknown field %q (a cluster file has daemons: only)", kv.name)
		}
		list = kv.value
	}
	if list == nil || isNullNode(list) {
		return nil, fail(root.Line, "no daemons: want daemons: with a list of daemons (- address: ...)")
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fail(list.Line, "daemons: want a list of daemons (- address: ...), not %s", kindOf(list))
	}
	if len(list.Content) == 0 {
		return nil, fail(list.Line, "daemons: the list is empty")
	}
	var out []ClusterFileDaemon
	names, addrs := map[string]int{}, map[string]int{}
	for i, item := range list.Content {
		where := fmt.Sprintf("daemons[%d]", i)
		if item.Kind == yaml.AliasNode {
			return nil, fail(item.Line, "%s: aliases (*name) are not taken in a cluster file", where)
		}
		if item.Kind != yaml.MappingNode {
			return nil, fail(item.Line, "%s: want a mapping (address: ..., name: ...), not %s", where, kindOf(item))
		}
		pairs, err := mappingPairs(item, fail)
		if err != nil {
			return nil, err
		}
		d := ClusterFileDaemon{Line: item.Line}
		for _, kv := range pairs {
			var to *string
			switch kv.name {
			case "name":
				to = &d.Name
			case "address":
				to = &d.Address
			case "token":
				to = &d.Token
			case "token_file":
				to = &d.TokenFile
			default:
				return nil, fail(kv.key.Line, "%s: unknown field %q (valid: %s)", where, kv.name, strings.Join(clusterFields, ", "))
			}
			v := kv.value
			switch {
			case v.Kind == yaml.AliasNode:
				return nil, fail(v.Line, "%s.%s: aliases (*name) are not taken in a cluster file", where, kv.name)
			case isNullNode(v):
				continue
			case v.Kind != yaml.ScalarNode:
				return nil, fail(v.Line, "%s.%s: want a string, not %s", where, kv.name, kindOf(v))
			}
			*to = v.Value
		}
		if err := checkEntry(d, where, fail); err != nil {
			return nil, err
		}
		name := d.Name
		if name == "" {
			name = d.Address
		}
		if l, ok := names[name]; ok {
			return nil, fail(d.Line, "%s: the name %q is the one of the daemon at line %d", where, name, l)
		}
		if l, ok := addrs[d.Address]; ok {
			return nil, fail(d.Line, "%s: the address %q is the one of the daemon at line %d", where, d.Address, l)
		}
		names[name], addrs[d.Address] = d.Line, d.Line
		out = append(out, d)
	}
	return out, nil
}

// checkEntry refuses an entry NewCluster could not use.
func checkEntry(d ClusterFileDaemon, where string, fail func(int, string, ...any) error) error {
	switch {
	case strings.TrimSpace(d.Address) == "":
		return fail(d.Line, "%s: no address: give a unix socket path or a URL (http://HOST:PORT)", where)
	case d.Token != "" && d.TokenFile != "":
		return fail(d.Line, "%s: token and token_file exclude each other: give one", where)
	case strings.ContainsRune(d.Address, 0):
		return fail(d.Line, "%s: the address holds a NUL byte", where)
	}
	if isURL(d.Address) {
		u, err := url.Parse(d.Address)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fail(d.Line, "%s: address %q: want http://HOST:PORT or https://HOST:PORT (or a unix socket path)", where, d.Address)
		}
	} else if d.Token != "" || d.TokenFile != "" {
		return fail(d.Line, "%s: a token goes with a URL (http://HOST:PORT); a unix socket is guarded by its file mode", where)
	}
	if msg := checkToken(d.Token); d.Token != "" && msg != "" {
		return fail(d.Line, "%s: token: %s", where, msg)
	}
	return nil
}

// checkToken says why a token cannot be sent ("" when it can): as the
// daemon's listener takes them, printable ASCII without spaces.
func checkToken(t string) string {
	if t == "" {
		return "empty"
	}
	for _, c := range t {
		if c <= ' ' || c > '~' {
			return "a token is printable ASCII without spaces (it is sent in an Authorization header)"
		}
	}
	return ""
}

func isURL(addr string) bool { return strings.Contains(addr, "://") }

// yamlPair is one key and its value in a mapping.
type yamlPair struct {
	key, value *yaml.Node
	name       string
}

// mappingPairs returns n's keys and values, refusing a key that is not a
// plain name, one given twice, and merges (<<), which a cluster file does
// not need.
func mappingPairs(n *yaml.Node, fail func(int, string, ...any) error) ([]yamlPair, error) {
	var out []yamlPair
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fail(k.Line, "a key must be a name, not %s", kindOf(k))
		}
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			return nil, fail(k.Line, "merges (<<) are not taken in a cluster file")
		}
		if l, dup := seen[k.Value]; dup {
			return nil, fail(k.Line, "%q is given twice (first at line %d)", k.Value, l)
		}
		seen[k.Value] = k.Line
		out = append(out, yamlPair{key: k, value: v, name: k.Value})
	}
	return out, nil
}

func isNullNode(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if isNullNode(n) {
			return "null"
		}
		return "a single value"
	}
	return "an empty document"
}
