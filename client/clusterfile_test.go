package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/kmaterialize/kmaterialize/client"
)

func TestParseClusterFile(t *testing.T) {
	good := `# two shards
daemons:
  - name: shard-a
    address: http://127.0.0.2:9466
    token: r3ad
  - address: /run/k/tables.db.sock
  - {name: c, address: "https://h:1", token_file: tok}
`
	got, err := client.ParseClusterFile("c.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []client.ClusterFileDaemon{
		{Name: "shard-a", Address: "http://127.0.0.2:9466", Token: "r3ad", Line: 3},
		{Address: "/run/k/tables.db.sock", Line: 6},
		{Name: "c", Address: "https://h:1", TokenFile: "tok", Line: 7},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ParseClusterFile (-want +got):\n%s", diff)
	}

	for _, c := range []struct {
		doc  string
		line int
		msg  string
	}{
		{"", 0, "empty"},
		{"daemons: []\n", 1, "empty"},
		{"daemons:\n", 1, "no daemons"},
		{"- address: /a\n", 1, "want a mapping"},
		{"daemons:\n  - address: /a\nextra: 1\n", 3, `unknown field "extra"`},
		{"daemons:\n  - address: /a\n    tokn: x\n", 3, `unknown field "tokn"`},
		{"daemons:\n  - name: a\n", 2, "no address"},
		{"daemons:\n  - address: /a\n    address: /b\n", 3, "given twice (first at line 2)"},
		{"daemons:\n  - address: /a\n  - address: /a\n", 3, "line 2"},
		{"daemons:\n  - {name: x, address: /a}\n  - {name: x, address: /b}\n", 3, `name "x"`},
		{"daemons:\n  - address: /a\n    token: s3cret\n", 2, "a token goes with a URL"},
		{"daemons:\n  - address: http://h:1\n    token: a\n    token_file: f\n", 2, "exclude each other"},
		{"daemons:\n  - address: ftp://h\n", 2, "want http://HOST:PORT"},
		{"daemons:\n  - address: http://h:1\n    token: \"has space\"\n", 2, "printable ASCII"},
		{"daemons:\n  - address: [a]\n", 2, "want a string"},
		{"daemons:\n  - &a {address: /a}\n  - *a\n", 3, "aliases"},
		{"d: &x {address: /a}\ndaemons:\n  - <<: *x\n", 1, "unknown field"},
		{"daemons:\n  - address: /a\n\t- address: /b\n", 2, "not valid YAML"},
		{"daemons:\n  - address: /a\n---\ndaemons: []\n", 3, "more than one YAML document"},
	} {
		_, err := client.ParseClusterFile("c.yaml", []byte(c.doc))
		var fe *client.ClusterFileError
		if !errors.As(err, &fe) || fe.Line != c.line || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseClusterFile(%q) = %v (line %v), want line %d and %q", c.doc, err, fe, c.line, c.msg)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || !strings.HasPrefix(err.Error(), "cluster file c.yaml") {
			t.Errorf("ParseClusterFile(%q): message %q quotes the token or does not name the file", c.doc, err)
		}
	}
}

func TestLoadClusterFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tok"), []byte("r3ad-t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cluster.yaml")
	doc := "daemons:\n  - {address: 'http://127.0.0.2:1', token_file: tok}\n  - {address: rel.sock}\n  - {address: http://127.0.0.3:1, token_file: missing}\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := client.LoadClusterFile(path)
	var fe *client.ClusterFileError
	if !errors.As(err, &fe) || fe.Line != 4 || !strings.Contains(err.Error(), "token_file") {
		t.Fatalf("LoadClusterFile with a missing token file: %v, want line 4 naming token_file", err)
	}
	if err := os.WriteFile(path, []byte(doc[:strings.LastIndex(doc, "  - {address: http")]), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := client.LoadClusterFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []client.ClusterDaemon{{Address: "http://127.0.0.2:1", Token: "r3ad-t0ken"}, {Address: filepath.Join(dir, "rel.sock")}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("LoadClusterFile (-want +got):\n%s", diff)
	}
	if _, err := client.NewCluster(got, nil); err != nil {
		t.Fatalf("NewCluster of a loaded file: %v", err)
	}
}

// FuzzParseClusterFile: any text is parsed or refused with a
// *ClusterFileError naming the file; what parses has an address per
// entry, unique names and addresses, a token only with a URL, and parses
// again to the same entries when written back as YAML.
func FuzzParseClusterFile(f *testing.F) {
	for _, s := range []string{
		"daemons:\n  - name: a\n    address: http://127.0.0.2:9466\n    token: r\n  - address: /s.sock\n",
		"daemons: [{address: /a}, {address: 'https://h:2', token_file: f}]\n",
		"daemons:\n  - &a {address: /a}\n  - *a\n",
		"daemons:\n  - address: /a\n---\n",
		"x: [",
		"daemons:\n  - address: !!binary aGk=\n",
		"daemons:\n  - address: 12\n    name: 0x1f\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ds, err := client.ParseClusterFile("f.yaml", data)
		if err != nil {
			var fe *client.ClusterFileError
			if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), "cluster file f.yaml") {
				t.Fatalf("error %v (%T) is not a *ClusterFileError naming the file", err, err)
			}
			return
		}
		if len(ds) == 0 {
			t.Fatal("parsed with no daemons")
		}
		names, addrs := map[string]bool{}, map[string]bool{}
		type entry struct {
			Name      string `yaml:"name,omitempty"`
			Address   string `yaml:"address"`
			Token     string `yaml:"token,omitempty"`
			TokenFile string `yaml:"token_file,omitempty"`
		}
		var back struct {
			Daemons []entry `yaml:"daemons"`
		}
		for _, d := range ds {
			name := d.Name
			if name == "" {
				name = d.Address
			}
			if strings.TrimSpace(d.Address) == "" || names[name] || addrs[d.Address] {
				t.Fatalf("entry %+v: no address, or a name or address twice", d)
			}
			if (d.Token != "" || d.TokenFile != "") && !strings.Contains(d.Address, "://") {
				t.Fatalf("entry %+v: a token without a URL", d)
			}
			names[name], addrs[d.Address] = true, true
			back.Daemons = append(back.Daemons, entry{Name: d.Name, Address: d.Address, Token: d.Token, TokenFile: d.TokenFile})
		}
		text, err := yaml.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		again, err := client.ParseClusterFile("f.yaml", text)
		if err != nil {
			t.Fatalf("written back as\n%s\nit does not parse: %v", text, err)
		}
		for i := range again {
			again[i].Line, ds[i].Line = 0, 0
		}
		if diff := cmp.Diff(ds, again); diff != "" {
			t.Fatalf("written back, parsed again (-first +again):\n%s", diff)
		}
	})
}
