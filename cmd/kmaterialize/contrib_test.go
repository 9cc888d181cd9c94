package main

// Tests of contrib/: the sample config loads as `serve` loads it, names
// every field the config file format has, and agrees with the systemd unit
// on where the database and the socket live.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kmaterialize/kmaterialize/serve"
)

const (
	contribConfig = "../../contrib/kmaterialize.yaml"
	contribUnit   = "../../contrib/kmaterialize.service"
)

// TestContribConfigLoads loads contrib/kmaterialize.yaml as `serve --config`
// does (config.Load, then serve's own checks, librdkafka's verdict on the
// properties included), with the environment variables it references set,
// and checks the values it says it sets.
func TestContribConfigLoads(t *testing.T) {
	pass, tok := fmt.Sprintf("kafka-pass-%d", os.Getpid()), fmt.Sprintf("admin-token-%d", os.Getpid())
	t.Setenv("KAFKA_PASSWORD", pass)
	t.Setenv("KMATERIALIZE_ADMIN_TOKEN", tok)
	cfg, err := loadServeConfig(contribConfig)
	if err != nil {
		t.Fatalf("contrib/kmaterialize.yaml does not load: %v", err)
	}
	if cfg.DB != "/var/lib/kmaterialize/tables.db" || cfg.Socket != "/run/kmaterialize/tables.sock" ||
		cfg.SocketMode != 0o660 || cfg.SocketGroup != "kmaterialize-readers" || cfg.Listen != "127.0.0.1:9466" || cfg.AllowRemote {
		t.Fatalf("loaded: %s", cfg)
	}
	if cfg.AdminToken.Reveal() != tok || cfg.Kafka.Properties["sasl.password"] != pass {
		t.Fatalf("${NAME} not expanded from the environment: admin token and sasl.password differ from what was set")
	}
	if got := cfg.Names(); !reflect.DeepEqual(got, []string{"balances", "votes"}) {
		t.Fatalf("tables %v", got)
	}
	if cfg.Tables[0].Schedule != "@every 10m" || cfg.Tables[1].Schedule != "*/15 * * * *" {
		t.Fatalf("schedules %q, %q", cfg.Tables[0].Schedule, cfg.Tables[1].Schedule)
	}
	// The catalog is resolved against the config file's directory and read.
	wantCat, err := filepath.Abs("../../contrib/booths.json")
	if err != nil {
		t.Fatal(err)
	}
	gotCat, err := filepath.Abs(cfg.Tables[1].Catalog)
	if err != nil || gotCat != wantCat {
		t.Fatalf("catalog %q, want %q", cfg.Tables[1].Catalog, wantCat)
	}
	raw, err := os.ReadFile(wantCat)
	if err != nil {
		t.Fatal(err)
	}
	var groups []string
	if err := json.Unmarshal(raw, &groups); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Tables[1].Spec.Catalog, groups) {
		t.Fatalf("catalog %v, file says %v", cfg.Tables[1].Spec.Catalog, groups)
	}
	// Nothing in the sample is a secret written out.
	b, err := os.ReadFile(contribConfig)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), pass) || strings.Contains(string(b), tok) {
		t.Fatal("the sample holds a secret value")
	}
}

// TestContribConfigComplete checks that the sample names every field of
// the config file format: the yaml tags of the config package's document
// structs (read from its source, so a field added there without a line in
// the sample fails here).
func TestContribConfigComplete(t *testing.T) {
	tags := yamlTags(t, "../../config/config.go", "file", "fileKafka", "fileTable")
	var doc yaml.Node
	b, err := os.ReadFile(contribConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	have := map[string]map[string]bool{"file": mapKeys(root), "fileKafka": {}, "fileTable": {}}
	if k := mapValue(root, "kafka"); k != nil {
		have["fileKafka"] = mapKeys(k)
	}
	if ts := mapValue(root, "tables"); ts != nil {
		for _, tn := range ts.Content {
			for k := range mapKeys(tn) {
				have["fileTable"][k] = true
			}
		}
	}
	for typ, want := range tags {
		if len(want) == 0 {
			t.Fatalf("no yaml tags found in config.%s: the test no longer reads the format", typ)
		}
		for _, tag := range want {
			if !have[typ][tag] {
				t.Errorf("contrib/kmaterialize.yaml does not show %s field %q", typ, tag)
			}
		}
	}
}

// yamlTags returns the yaml tag names of each named struct type in file.
func yamlTags(t *testing.T, file string, types ...string) map[string][]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, name := range types {
		out[name] = nil
	}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if _, want := out[ts.Name.Name]; !ok || !want {
			return true
		}
		for _, fl := range st.Fields.List {
			if fl.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(fl.Tag.Value)
			if err != nil {
				t.Fatal(err)
			}
			name, _, _ := strings.Cut(reflect.StructTag(tag).Get("yaml"), ",")
			if name != "" && name != "-" {
				out[ts.Name.Name] = append(out[ts.Name.Name], name)
			}
		}
		return false
	})
	return out
}

func mapKeys(n *yaml.Node) map[string]bool {
	out := map[string]bool{}
	if n.Kind != yaml.MappingNode {
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		out[n.Content[i].Value] = true
	}
	return out
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// unitSettings reads a systemd unit's Key=Value lines ([Section] headers
// and comments skipped); a key set twice keeps every value.
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not Key=Value", path, line)
		}
		out[k] = append(out[k], v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestContribUnitMatchesConfig checks that the systemd unit starts serve
// with the sample's install path as Type=notify (which serve supports:
// TestServeProcess), reloads with SIGHUP, and gives the daemon writable
// directories where the sample puts the database and the socket.
func TestContribUnitMatchesConfig(t *testing.T) {
	t.Setenv("KAFKA_PASSWORD", "x")
	t.Setenv("KMATERIALIZE_ADMIN_TOKEN", "y")
	cfg, err := loadServeConfig(contribConfig)
	if err != nil {
		t.Fatal(err)
	}
	u := unitSettings(t, contribUnit)
	one := func(k string) string {
		if len(u[k]) != 1 {
			t.Fatalf("unit: %s set %d times, want once: %q", k, len(u[k]), u[k])
		}
		return u[k][0]
	}
	if one("Type") != "notify" || !strings.HasSuffix(one("ExecStart"), " serve --config /etc/kmaterialize/kmaterialize.yaml") ||
		one("ExecReload") != "/bin/kill -HUP $MAINPID" {
		t.Fatalf("unit: Type=%s ExecStart=%s ExecReload=%s", one("Type"), one("ExecStart"), one("ExecReload"))
	}
	if one("User") == "root" || one("User") == "" || one("Group") == "" {
		t.Fatalf("unit: User=%s Group=%s, want a dedicated user and group", one("User"), one("Group"))
	}
	if filepath.Dir(cfg.DB) != "/var/lib/"+one("StateDirectory") || !contains(u["ReadWritePaths"], filepath.Dir(cfg.DB)) {
		t.Fatalf("unit: StateDirectory=%s ReadWritePaths=%v, config db %s", one("StateDirectory"), u["ReadWritePaths"], cfg.DB)
	}
	if filepath.Dir(cfg.Socket) != "/run/"+one("RuntimeDirectory") {
		t.Fatalf("unit: RuntimeDirectory=%s, config socket %s", one("RuntimeDirectory"), cfg.Socket)
	}
	if !contains(strings.Fields(one("SupplementaryGroups")), cfg.SocketGroup) {
		t.Fatalf("unit: SupplementaryGroups=%s does not hold socket_group %s (chown needs membership)", one("SupplementaryGroups"), cfg.SocketGroup)
	}
	want := map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes"}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if one(k) != want[k] {
			t.Errorf("unit: %s=%s, want %s", k, one(k), want[k])
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestContribUnitStopTimeout: the unit's TimeoutStopSec exceeds the
// sample config's shutdown_timeout (serve's default when unset) by at
// least 15s, so that systemd never kills a daemon still publishing.
func TestContribUnitStopTimeout(t *testing.T) {
	t.Setenv("KAFKA_PASSWORD", "x")
	t.Setenv("KMATERIALIZE_ADMIN_TOKEN", "y")
	cfg, err := loadServeConfig(contribConfig)
	if err != nil {
		t.Fatal(err)
	}
	shutdown := cfg.ShutdownTimeout
	if shutdown == 0 {
		shutdown = serve.DefaultShutdownTimeout
	}
	unit, err := os.ReadFile(contribUnit)
	if err != nil {
		t.Fatal(err)
	}
	var stop time.Duration
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "TimeoutStopSec="); ok {
			if stop, err = time.ParseDuration(v); err != nil {
				t.Fatalf("TimeoutStopSec=%s: %v", v, err)
			}
		}
	}
	if stop < shutdown+15*time.Second {
		t.Fatalf("TimeoutStopSec %s, want at least shutdown_timeout %s + 15s", stop, shutdown)
	}
}
