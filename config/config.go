package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/listen"
	"github.com/kmaterialize/kmaterialize/internal/suggest"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
)

// DefaultSocketMode is the socket's file mode when socket_mode is not set:
// only the daemon's own user may read and trigger runs.
const DefaultSocketMode os.FileMode = 0o600

// Config is a loaded, checked config file. Paths are absolute or relative
// to the working directory (already resolved against the file's
// directory).
type Config struct {
	Path        string      // the file it was loaded from
	DB          string      // "" when the file names none
	Socket      string      // default DB + ".sock"
	SocketMode  os.FileMode // default DefaultSocketMode
	SocketGroup string      // "" = the process's group
	Listen      string      // optional TCP address
	AllowRemote bool
	AdminToken  Secret
	// The TCP listener's read and metrics tokens and TLS (read_token,
	// metrics_token, tls_cert, tls_key, allow_plaintext_tokens): see
	// serve.Config. The paths are resolved against the file's directory.
	ReadToken            Secret
	MetricsToken         Secret
	TLSCert, TLSKey      string
	AllowPlaintextTokens bool
	Kafka                Kafka
	// SchemaRegistry is the registry that tables with an avro, protobuf
	// or jsonschema format decode with; its URL is "" when the file has
	// none.
	SchemaRegistry SchemaRegistry
	Tables         []Table // in file order

	// The daemon's runs (docs/daemon.md, "Runs: the queue, retries,
	// cancel and shutdown"); 0 means serve's default.
	MaxConcurrentRuns int           // max_concurrent_runs: runs going at once (default 1)
	RetryBackoffMax   time.Duration // retry_backoff_max: the longest wait between retries of a failed first build (default 1m)
	ShutdownTimeout   time.Duration // shutdown_timeout: how long SIGTERM waits for runs past their replay (default 30s)
	// Memory is the daemon's memory (memory): what its followers, its
	// runs and its read path may take together, and what the Go memory
	// limit is set from. It is at least MemoryParts().Total (a file whose
	// memory is less is refused); a file without memory gets that total.
	Memory int64
	// Large answers (docs/daemon.md "Large answers: paging, spooling and
	// limits"): 0 means the daemon's default (serve.Config).
	SpoolMaxBytes    int64
	MaxHeavyRequests int
	PageMaxBytes     int
	// Feed bounds the change feeds (feed:, docs/daemon.md "The change
	// feed"); zero fields mean the daemon's defaults.
	Feed Feed
}

// Feed is the feed: section: the change feeds' bounds.
type Feed struct {
	RetainBytes      int64         // retain_bytes: each table's feed keeps at least this much...
	RetainFor        time.Duration // retain_for: ... and at least this long, whichever holds more
	MaxBytes         int64         // max_bytes: and never more than this per table
	SlowWatcherBytes int64         // slow_watcher_bytes: a watcher further behind is cut off
	SpoolMaxBytes    int64         // spool_max_bytes: the spooled publishes' commits on disk
	MaxWatchers      int           // max_watchers: open feeds of all tables at once
	Heartbeat        time.Duration // heartbeat: how often a feed without commits says so
}

// Kafka is the connection every table's replay uses.
type Kafka struct {
	Brokers    string
	Properties Properties // ${NAME} already expanded
}

// SchemaRegistry is the file's schema_registry section, ${NAME} already
// expanded. The password and the token are Secrets: never shown.
type SchemaRegistry struct {
	URL         string
	Username    string
	Password    Secret
	BearerToken Secret
}

// Registry returns the settings as package decode takes them (the
// process's environment may still override them: decode.Registry.WithEnv).
func (r SchemaRegistry) Registry() decode.Registry {
	return decode.Registry{URL: r.URL, Username: r.Username, Password: r.Password.Reveal(), BearerToken: r.BearerToken.Reveal()}
}

// Table is one table of the file: its definition and its schedule.
type Table struct {
	Spec     materialize.Spec
	Schedule string // "" unscheduled; checked by CheckSchedule
	// Catalog is the catalog file as resolved (""  without one); its
	// contents are in Spec.Catalog.
	Catalog string
	Line    int // where the table starts in the file

	// Follow keeps the table current in the daemon between rebuilds
	// (follow: true): it applies what the topic gains in small
	// transactions, at most FollowInterval apart.
	Follow bool
	// FollowInterval is follow_interval: how long records read wait, at
	// most, before they are applied. 0 means the default (200ms).
	FollowInterval time.Duration
	// MaxLag is max_lag: the most records a followed table may be behind,
	// on any partition, for /readyz. 0 means the default (10000).
	MaxLag int64
	// RebuildIfNeeded (rebuild_if_needed) rebuilds a followed table in the
	// background when following cannot go on (records deleted below its
	// checkpoint, a conflict), serving the old table meanwhile.
	RebuildIfNeeded bool
}

// file is the YAML document. Every field of the format is here: the
// decoder refuses any other (KnownFields). A field tagged expand:"env"
// expands ${NAME} (expand.go); every other string is literal, where a ${
// is refused.
type file struct {
	DB          string `yaml:"db" expand:"env"`
	Socket      string `yaml:"socket" expand:"env"`
	SocketMode  string `yaml:"socket_mode"`
	SocketGroup string `yaml:"socket_group"`
	Listen      string `yaml:"listen"`
	AllowRemote bool   `yaml:"allow_remote"`
	AdminToken  string `yaml:"admin_token" expand:"env"`

	ReadToken            string `yaml:"read_token" expand:"env"`
	MetricsToken         string `yaml:"metrics_token" expand:"env"`
	TLSCert              string `yaml:"tls_cert" expand:"env"`
	TLSKey               string `yaml:"tls_key" expand:"env"`
	AllowPlaintextTokens bool   `yaml:"allow_plaintext_tokens"`

	Kafka  fileKafka   `yaml:"kafka"`
	Tables []fileTable `yaml:"tables"`

	MaxConcurrentRuns *int   `yaml:"max_concurrent_runs"`
	RetryBackoffMax   string `yaml:"retry_backoff_max"`
	ShutdownTimeout   string `yaml:"shutdown_timeout"`

	SchemaRegistry fileSchemaRegistry `yaml:"schema_registry"`

	// Memory is the daemon's memory (memory.go).
	Memory           string   `yaml:"memory"`
	SpoolMaxBytes    int64    `yaml:"spool_max_bytes"`
	MaxHeavyRequests int      `yaml:"max_heavy_requests"`
	PageMaxBytes     int      `yaml:"page_max_bytes"`
	Feed             fileFeed `yaml:"feed"`
}

type fileFeed struct {
	RetainBytes      string `yaml:"retain_bytes"`
	RetainFor        string `yaml:"retain_for"`
	MaxBytes         string `yaml:"max_bytes"`
	SlowWatcherBytes string `yaml:"slow_watcher_bytes"`
	SpoolMaxBytes    string `yaml:"spool_max_bytes"`
	MaxWatchers      *int   `yaml:"max_watchers"`
	Heartbeat        string `yaml:"heartbeat"`
}

type fileSchemaRegistry struct {
	URL         string `yaml:"url" expand:"env"`
	Username    string `yaml:"username" expand:"env"`
	Password    string `yaml:"password" expand:"env"`
	BearerToken string `yaml:"bearer_token" expand:"env"`
}

type fileKafka struct {
	Brokers    string            `yaml:"brokers" expand:"env"`
	Properties map[string]string `yaml:"properties" expand:"env"`
}

type fileTable struct {
	Name               string   `yaml:"name"`
	Topic              string   `yaml:"topic"`
	Fold               string   `yaml:"fold"`
	Schedule           string   `yaml:"schedule"`
	End                string   `yaml:"end"`
	StallTimeout       string   `yaml:"stall_timeout"`
	IdentityField      string   `yaml:"identity_field"`
	GroupField         string   `yaml:"group_field"`
	IgnoreFields       []string `yaml:"ignore_fields"`
	Catalog            string   `yaml:"catalog" expand:"env"`
	AllowUnknownGroups bool     `yaml:"allow_unknown_groups"`
	OnBadRecord        string   `yaml:"on_bad_record"`
	AllowEmpty         bool     `yaml:"allow_empty"`
	ValueFormat        string   `yaml:"value_format"`
	KeyFormat          string   `yaml:"key_format"`
	Follow             bool     `yaml:"follow"`
	FollowInterval     string   `yaml:"follow_interval"`
	MaxLag             *int64   `yaml:"max_lag"`
	RebuildIfNeeded    bool     `yaml:"rebuild_if_needed"`
	Keep               *int     `yaml:"keep"`
	MaxChange          *string  `yaml:"max_change"`
	Memory             string   `yaml:"memory"`
	Readers            int      `yaml:"readers"`
	// Partitions and Partitioner make the table a shard (docs/shards.md):
	// partitions.go.
	Partitions  filePartitions `yaml:"partitions"`
	Partitioner string         `yaml:"partitioner"`
}

// Load reads and checks the config file at path, expanding ${NAME} from the
// process's environment in the fields that expand (ExpandingFields).
// Every problem is an *Error (ErrInvalid).
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Path: path, Msg: err.Error(), Err: err}
	}
	return Parse(data, ParseOptions{Path: path})
}

// ParseOptions say where a config's bytes came from.
type ParseOptions struct {
	// Path is the file's name, for messages and as the base of relative
	// paths (its directory).
	Path string
	// LookupEnv expands ${NAME}; default os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// Parse checks a config document; see Load.
func Parse(data []byte, o ParseOptions) (*Config, error) {
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	p := &parser{path: o.Path, dir: filepath.Dir(o.Path), env: o.LookupEnv}
	if o.Path == "" {
		p.dir = "."
	}
	return p.parse(data)
}

type parser struct {
	path string
	dir  string
	env  func(string) (string, bool)
	root *yaml.Node // the document's top mapping, for line numbers
}

func (p *parser) errorf(line int, field, format string, args ...any) *Error {
	return &Error{Path: p.path, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// notDuration says why value is not a duration: a bare number lacks its
// unit ("use 30s"), anything else is shown examples.
func notDuration(value, examples string) string {
	if fixed, ok := suggest.Duration(value); ok {
		return "a duration needs a unit: use " + fixed
	}
	return "not a duration (" + examples + ")"
}

func (p *parser) parse(data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, p.syntaxError(err)
	}
	if len(doc.Content) == 0 {
		return nil, p.errorf(0, "", "the file is empty; it needs at least db, kafka and tables")
	}
	if doc.Content[0].Kind != yaml.MappingNode {
		return nil, p.errorf(doc.Content[0].Line, "", "the document is not a mapping of fields (db, kafka, tables, ...)")
	}
	p.root = doc.Content[0]

	// The walk finds, with their nodes' lines, what the decoder would
	// refuse (yamltree.go); the decode then only fills f.
	if err := p.checkShape(p.root, reflect.TypeFor[file]()); err != nil {
		return nil, err
	}
	var f file
	if err := p.root.Decode(&f); err != nil {
		return nil, p.decodeError()
	}
	if err := p.literals(&f); err != nil {
		return nil, err
	}
	return p.build(&f)
}

// line returns the line of the value at path (mapping keys and sequence
// indexes as strings) from the top of the document, or of the nearest
// ancestor found; 0 when none.
func (p *parser) line(path ...string) int {
	n := p.root
	line := 0
	for _, step := range path {
		switch n.Kind {
		case yaml.MappingNode:
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == step {
					next = n.Content[i+1]
				}
			}
			if next == nil {
				return line
			}
			n = next
		case yaml.SequenceNode:
			i, err := strconv.Atoi(step)
			if err != nil || i < 0 || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
		default:
			return line
		}
		line = n.Line
	}
	return line
}

func (p *parser) resolve(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(p.dir, path)
}

func (p *parser) build(f *file) (*Config, error) {
	// db, socket and kafka.brokers expand ${NAME} (systemd's
	// ${STATE_DIRECTORY}, a broker list kept in the environment).
	var db, socket, brokers string
	for _, fv := range []struct {
		key   []string
		value string
		dst   *string
	}{{[]string{"db"}, f.DB, &db}, {[]string{"socket"}, f.Socket, &socket}, {[]string{"kafka", "brokers"}, f.Kafka.Brokers, &brokers}} {
		v, err := p.expand(fv.value)
		if err != nil {
			return nil, p.errorf(p.line(fv.key...), strings.Join(fv.key, "."), "%v", err)
		}
		*fv.dst = v
	}
	c := &Config{
		Path:        p.path,
		DB:          p.resolve(db),
		Socket:      p.resolve(socket),
		SocketMode:  DefaultSocketMode,
		SocketGroup: f.SocketGroup,
		Listen:      f.Listen,
		AllowRemote: f.AllowRemote,
		Kafka:       Kafka{Brokers: strings.TrimSpace(brokers), Properties: Properties{}},
	}
	if c.Socket == "" && c.DB != "" {
		c.Socket = c.DB + ".sock"
	}
	for _, l := range []struct {
		name string
		v    int64
	}{{"spool_max_bytes", f.SpoolMaxBytes}, {"max_heavy_requests", int64(f.MaxHeavyRequests)}, {"page_max_bytes", int64(f.PageMaxBytes)}} {
		if l.v < 0 {
			return nil, p.errorf(p.line(l.name), l.name, "%d: want a positive number (or leave it out for the default)", l.v)
		}
	}
	c.SpoolMaxBytes, c.MaxHeavyRequests, c.PageMaxBytes = f.SpoolMaxBytes, f.MaxHeavyRequests, f.PageMaxBytes
	if f.SocketMode != "" {
		m, err := ParseSocketMode(f.SocketMode)
		if err != nil {
			return nil, p.errorf(p.line("socket_mode"), "socket_mode", "%v", err)
		}
		c.SocketMode = m
	}
	if err := p.remote(f, c); err != nil {
		return nil, err
	}
	for k, v := range f.Kafka.Properties {
		field := "kafka.properties." + k
		if strings.TrimSpace(k) == "" {
			return nil, p.errorf(p.line("kafka", "properties"), "kafka.properties", "a property with an empty name")
		}
		// Never the value in a message: it may be a secret.
		ev, err := p.expand(v)
		if err != nil {
			return nil, p.errorf(p.line("kafka", "properties", k), field, "%v", err)
		}
		c.Kafka.Properties[k] = ev
	}
	var err error
	if c.SchemaRegistry, err = p.schemaRegistry(f.SchemaRegistry); err != nil {
		return nil, err
	}
	if err := p.runSettings(f, c); err != nil {
		return nil, err
	}
	seen := map[string]int{}
	for i, ft := range f.Tables {
		t, err := p.table(i, ft)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[t.Spec.Name]; dup {
			return nil, p.errorf(p.line("tables", strconv.Itoa(i), "name"), fmt.Sprintf("tables[%d].name", i),
				"table %q is defined twice (first at line %d)", t.Spec.Name, first)
		}
		seen[t.Spec.Name] = t.Line
		c.Tables = append(c.Tables, t)
	}
	if err := p.checkMemory(c, f.Memory); err != nil {
		return nil, err
	}
	return c, nil
}

// schemaRegistry checks the schema_registry section, expanding ${NAME} in
// every field; a value is never in a message (it may be a secret).
func (p *parser) schemaRegistry(f fileSchemaRegistry) (SchemaRegistry, error) {
	var out SchemaRegistry
	var vals [4]string
	for i, fv := range []struct {
		key, value string
	}{{"url", f.URL}, {"username", f.Username}, {"password", f.Password}, {"bearer_token", f.BearerToken}} {
		v, err := p.expand(fv.value)
		if err != nil {
			return out, p.errorf(p.line("schema_registry", fv.key), "schema_registry."+fv.key, "%v", err)
		}
		vals[i] = strings.TrimSpace(v)
	}
	out = SchemaRegistry{URL: vals[0], Username: vals[1], Password: Secret(vals[2]), BearerToken: Secret(vals[3])}
	if err := out.Registry().Check(); err != nil {
		return out, p.errorf(p.line("schema_registry"), "schema_registry", "%v", err)
	}
	return out, nil
}

// specFields maps a materialize.Spec field to the table's YAML key.
var specFields = map[string]string{
	materialize.FieldName: "name", materialize.FieldTopic: "topic", materialize.FieldFold: "fold",
	materialize.FieldIdentityField: "identity_field", materialize.FieldGroupField: "group_field",
	materialize.FieldIgnoreFields: "ignore_fields", materialize.FieldCatalog: "catalog",
	materialize.FieldAllowUnknownGroups: "allow_unknown_groups", materialize.FieldOnBadRecord: "on_bad_record",
	materialize.FieldEnd: "end", materialize.FieldStallTimeout: "stall_timeout",
	materialize.FieldValueFormat: "value_format", materialize.FieldKeyFormat: "key_format",
	materialize.FieldKeep: "keep", materialize.FieldMaxChange: "max_change",
	materialize.FieldMemory: "memory", materialize.FieldReaders: "readers",
	materialize.FieldPartitions: "partitions", materialize.FieldPartitioner: "partitioner",
}

func (p *parser) table(i int, ft fileTable) (Table, error) {
	idx := strconv.Itoa(i)
	at := func(key string) int { return p.line("tables", idx, key) }
	bad := func(key, format string, args ...any) error {
		return p.errorf(at(key), fmt.Sprintf("tables[%d].%s", i, key), format, args...)
	}
	t := Table{Line: p.line("tables", idx), Schedule: ft.Schedule}
	if ft.Name == "" {
		return t, p.errorf(t.Line, fmt.Sprintf("tables[%d]", i), "name is required")
	}
	s := materialize.Spec{
		Name: ft.Name, Topic: ft.Topic, Fold: ft.Fold,
		IdentityField: ft.IdentityField, GroupField: ft.GroupField, IgnoreFields: ft.IgnoreFields,
		AllowUnknownGroups: ft.AllowUnknownGroups, AllowEmpty: ft.AllowEmpty,
	}
	if s.Fold == "" {
		s.Fold = materialize.FoldLatest
	}
	if s.Topic == "" {
		return t, p.errorf(t.Line, fmt.Sprintf("tables[%d] (%s)", i, ft.Name), "topic is required")
	}
	if ft.OnBadRecord != "" {
		ob, err := fold.ParseOnBadRecord(ft.OnBadRecord)
		if err != nil {
			return t, bad("on_bad_record", "%q: want fail or skip", ft.OnBadRecord)
		}
		s.OnBadRecord = ob
	}
	for _, f := range []struct {
		key, value string
		dst        *decode.Format
	}{{"value_format", ft.ValueFormat, &s.ValueFormat}, {"key_format", ft.KeyFormat, &s.KeyFormat}} {
		if f.value == "" {
			continue
		}
		format, err := decode.ParseFormat(f.value)
		if err != nil {
			return t, bad(f.key, "%q: want %s", f.value, decode.FormatNames)
		}
		*f.dst = format
	}
	switch ft.End {
	case "":
		s.End = replay.EndHigh
	case string(replay.EndHigh), string(replay.EndStable):
		s.End = replay.EndMark(ft.End)
	default:
		return t, bad("end", "%q: want high or stable", ft.End)
	}
	if ft.StallTimeout != "" {
		d, err := time.ParseDuration(ft.StallTimeout)
		if err != nil {
			return t, bad("stall_timeout", "%q: %s", ft.StallTimeout, notDuration(ft.StallTimeout, "e.g. 30s, 2m"))
		}
		if d <= 0 {
			return t, bad("stall_timeout", "%s: must be positive", d)
		}
		s.StallTimeout = d
	}
	if ft.Keep != nil {
		if *ft.Keep < 0 {
			return t, bad("keep", "%d: must not be negative", *ft.Keep)
		}
		s.Keep = *ft.Keep
	}
	if ft.MaxChange != nil {
		v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(*ft.MaxChange), "%"), 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return t, bad("max_change", "%q: want a percentage, e.g. 10 or 2.5%%", *ft.MaxChange)
		}
		s.MaxChange = &v
	}
	if ft.Memory != "" {
		m, err := ParseSize(ft.Memory)
		if err != nil {
			return t, bad("memory", "%v", err)
		}
		s.Memory = m
	}
	s.Readers = ft.Readers
	if err := tablePartitions(&s, ft, bad); err != nil {
		return t, err
	}
	if err := CheckSchedule(ft.Schedule); err != nil {
		return t, bad("schedule", "%v", err)
	}
	if err := p.followFields(&t, ft, bad); err != nil {
		return t, err
	}
	if ft.Catalog != "" {
		if s.Fold != materialize.FoldCount {
			return t, bad("catalog", "applies to fold count only")
		}
		catPath, err := p.expand(ft.Catalog)
		if err != nil {
			return t, bad("catalog", "%v", err)
		}
		t.Catalog = p.resolve(catPath)
		data, err := os.ReadFile(t.Catalog)
		if err != nil {
			return t, &Error{Path: p.path, Line: at("catalog"), Field: fmt.Sprintf("tables[%d].catalog", i), Msg: err.Error(), Err: err}
		}
		cat, err := fold.ParseCatalog(data)
		if err != nil {
			return t, &Error{Path: p.path, Line: at("catalog"), Field: fmt.Sprintf("tables[%d].catalog", i),
				Msg: fmt.Sprintf("%s: %v", t.Catalog, err), Err: err}
		}
		s.Catalog = cat
	}
	if err := s.Validate(); err != nil {
		var se *materialize.SpecError
		if errors.As(err, &se) {
			key := specFields[se.Field]
			msg := se.Reason
			if se.Value != "" {
				msg = se.Value + ": " + msg
			}
			return t, &Error{Path: p.path, Line: at(key), Field: fmt.Sprintf("tables[%d].%s", i, key), Msg: msg, Err: err}
		}
		return t, &Error{Path: p.path, Line: t.Line, Field: fmt.Sprintf("tables[%d]", i), Msg: err.Error(), Err: err}
	}
	t.Spec = s
	return t, nil
}

// ParseSocketMode parses an octal file mode such as "0660" or "660"
// (permission bits only, listen.CheckSocketMode).
func ParseSocketMode(s string) (os.FileMode, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0o"), 8, 32)
	if err != nil || v > 0o777 {
		return 0, fmt.Errorf("%q: want an octal file mode such as \"0660\"", s)
	}
	if p := listen.CheckSocketMode(os.FileMode(v)); p != nil {
		return 0, fmt.Errorf("%q: %s", s, p.Reason)
	}
	return os.FileMode(v), nil
}

// remote reads listen's tokens and TLS: admin_token, read_token,
// metrics_token (secrets: ${NAME} expands, a value is never in a message),
// tls_cert and tls_key (paths: ${NAME} expands, relative to the file),
// allow_plaintext_tokens. allow_remote closes the listener: it needs a
// token, and TLS unless allow_plaintext_tokens; read_token and
// metrics_token apply with allow_remote only. The rules are
// listen.Check's, by which serve checks serve.Config too; here the error
// gets the setting's line.
func (p *parser) remote(f *file, c *Config) error {
	for _, fv := range []struct {
		key   string
		value string
		dst   *Secret
	}{{"admin_token", f.AdminToken, &c.AdminToken}, {"read_token", f.ReadToken, &c.ReadToken}, {"metrics_token", f.MetricsToken, &c.MetricsToken}} {
		v, err := p.expand(fv.value)
		if err != nil {
			return p.errorf(p.line(fv.key), fv.key, "%v", err)
		}
		*fv.dst = Secret(v)
	}
	for _, fv := range []struct {
		key   string
		value string
		dst   *string
	}{{"tls_cert", f.TLSCert, &c.TLSCert}, {"tls_key", f.TLSKey, &c.TLSKey}} {
		v, err := p.expand(fv.value)
		if err != nil {
			return p.errorf(p.line(fv.key), fv.key, "%v", err)
		}
		*fv.dst = p.resolve(v)
	}
	c.AllowPlaintextTokens = f.AllowPlaintextTokens
	prob := listen.Check(listen.Settings{Listen: c.Listen, AllowRemote: c.AllowRemote,
		AdminToken: string(c.AdminToken), ReadToken: string(c.ReadToken), MetricsToken: string(c.MetricsToken),
		TLSCert: c.TLSCert, TLSKey: c.TLSKey, AllowPlaintextTokens: c.AllowPlaintextTokens})
	if prob == nil {
		return nil
	}
	if prob.Value != "" {
		return p.errorf(p.line(prob.Field), prob.Field, "%q: %s", prob.Value, prob.Reason)
	}
	return p.errorf(p.line(prob.Field), prob.Field, "%s", prob.Reason)
}

// Names returns the table names in file order.
func (c *Config) Names() []string {
	out := make([]string, len(c.Tables))
	for i, t := range c.Tables {
		out[i] = t.Spec.Name
	}
	return out
}

// Table returns the named table's definition, or an *UnknownTableError
// (ErrUnknownTable) that lists the tables the file has.
func (c *Config) Table(name string) (materialize.Spec, error) {
	for _, t := range c.Tables {
		if t.Spec.Name == name {
			return t.Spec, nil
		}
	}
	return materialize.Spec{}, &UnknownTableError{Path: c.Path, Name: name, Tables: c.Names()}
}

// String summarizes the config, secrets redacted.
func (c *Config) String() string {
	return fmt.Sprintf("config %s: db %s, socket %s (%04o), listen %q, brokers %q, properties %s, admin token %q, tables %s",
		c.Path, c.DB, c.Socket, c.SocketMode, c.Listen, c.Kafka.Brokers, c.Kafka.Properties, c.AdminToken.String(),
		strings.Join(c.Names(), ","))
}

// followFields reads follow, follow_interval, max_lag and
// rebuild_if_needed; the last three need follow: true.
func (p *parser) followFields(t *Table, ft fileTable, bad func(key, format string, args ...any) error) error {
	t.Follow, t.RebuildIfNeeded = ft.Follow, ft.RebuildIfNeeded
	if !ft.Follow {
		switch {
		case ft.FollowInterval != "":
			return bad("follow_interval", "applies to follow: true only")
		case ft.MaxLag != nil:
			return bad("max_lag", "applies to follow: true only")
		case ft.RebuildIfNeeded:
			return bad("rebuild_if_needed", "applies to follow: true only")
		}
		return nil
	}
	if ft.FollowInterval != "" {
		d, err := time.ParseDuration(ft.FollowInterval)
		if err != nil {
			return bad("follow_interval", "%q: %s", ft.FollowInterval, notDuration(ft.FollowInterval, "e.g. 200ms, 1s"))
		}
		if d <= 0 {
			return bad("follow_interval", "%s: must be positive", d)
		}
		t.FollowInterval = d
	}
	if ft.MaxLag != nil {
		if *ft.MaxLag <= 0 {
			return bad("max_lag", "%d: must be a positive number of records", *ft.MaxLag)
		}
		t.MaxLag = *ft.MaxLag
	}
	return nil
}

// runSettings reads the daemon's run settings (max_concurrent_runs,
// retry_backoff_max, shutdown_timeout) into c.
func (p *parser) runSettings(f *file, c *Config) error {
	if n := f.MaxConcurrentRuns; n != nil {
		if *n < 1 {
			return p.errorf(p.line("max_concurrent_runs"), "max_concurrent_runs", "%d: want at least 1", *n)
		}
		c.MaxConcurrentRuns = *n
	}
	for _, d := range []struct {
		key string
		val string
		dst *time.Duration
	}{{"retry_backoff_max", f.RetryBackoffMax, &c.RetryBackoffMax}, {"shutdown_timeout", f.ShutdownTimeout, &c.ShutdownTimeout}} {
		if d.val == "" {
			continue
		}
		v, err := time.ParseDuration(d.val)
		if err != nil {
			return p.errorf(p.line(d.key), d.key, "%q: %s", d.val, notDuration(d.val, "e.g. 30s, 1m"))
		}
		if v <= 0 {
			return p.errorf(p.line(d.key), d.key, "%q: must be positive", d.val)
		}
		*d.dst = v
	}
	return p.feedSettings(f, c)
}

// feedSettings reads the feed: section into c.Feed.
func (p *parser) feedSettings(f *file, c *Config) error {
	ff := f.Feed
	for _, s := range []struct {
		key string
		val string
		dst *int64
	}{{"retain_bytes", ff.RetainBytes, &c.Feed.RetainBytes}, {"max_bytes", ff.MaxBytes, &c.Feed.MaxBytes}, {"slow_watcher_bytes", ff.SlowWatcherBytes, &c.Feed.SlowWatcherBytes}, {"spool_max_bytes", ff.SpoolMaxBytes, &c.Feed.SpoolMaxBytes}} {
		if s.val == "" {
			continue
		}
		v, err := ParseSize(s.val)
		if err != nil {
			return p.errorf(p.line("feed", s.key), "feed."+s.key, "%v", err)
		}
		*s.dst = v
	}
	if c.Feed.MaxBytes > 0 && c.Feed.RetainBytes > c.Feed.MaxBytes {
		return p.errorf(p.line("feed", "max_bytes"), "feed.max_bytes", "%s is less than retain_bytes %s", FormatSize(c.Feed.MaxBytes), FormatSize(c.Feed.RetainBytes))
	}
	for _, d := range []struct {
		key string
		val string
		dst *time.Duration
	}{{"retain_for", ff.RetainFor, &c.Feed.RetainFor}, {"heartbeat", ff.Heartbeat, &c.Feed.Heartbeat}} {
		if d.val == "" {
			continue
		}
		v, err := time.ParseDuration(d.val)
		if err != nil {
			return p.errorf(p.line("feed", d.key), "feed."+d.key, "%q: %s", d.val, notDuration(d.val, "e.g. 5m, 5s"))
		}
		if v <= 0 {
			return p.errorf(p.line("feed", d.key), "feed."+d.key, "%q: must be positive", d.val)
		}
		*d.dst = v
	}
	if n := ff.MaxWatchers; n != nil {
		if *n < 1 || *n > 100000 {
			return p.errorf(p.line("feed", "max_watchers"), "feed.max_watchers", "%d: want 1 to 100000", *n)
		}
		c.Feed.MaxWatchers = *n
	}
	return nil
}
