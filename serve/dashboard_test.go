package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The Grafana dashboard (contrib/grafana/kmaterialize.json) against the
// daemon's own /metrics: every selector of every query must match series
// that a daemon with a followed table, a rebuild and some reads behind it
// exports, and every label a query groups by must be on them. The queries
// are read with a small PromQL reader (selectors, functions, aggregations
// with by/without, binary operators, numbers, ranges): a query outside
// that subset fails the test instead of passing unread.

const dashboardPath = "../contrib/grafana/kmaterialize.json"

// Labels Prometheus adds to every series it scrapes (the target's), which
// the exposition itself cannot have.
var targetLabels = map[string]string{"instance": "kmaterialize-test:9466", "job": "kmaterialize"}

// TestDashboardQueriesExportedMetrics runs a daemon with a followed table
// that has been rebuilt and read, scrapes /metrics, and checks every query
// of the dashboard against the series, with the dashboard's variables as
// Grafana would fill them for that daemon.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	topic := newTopic(t)
	first := records(1, 40, 12)
	produce(t, topic, first)
	d := start(t, baseConfig(t, followedTable("live", topic, FollowSettings{})))
	waitFor(t, "state following", 60*time.Second, func() bool {
		return d.c.table(t, "live").State == StateFollowing
	})
	// A rebuild besides the first build, once the first run has ended.
	waitFor(t, "the first run to end", 60*time.Second, func() bool { return d.c.table(t, "live").Run == nil })
	r := d.c.do(t, "POST", "/v1/tables/live/rebuild?wait=1", nil)
	var res rebuildResult
	if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil || res.ExitCode != 0 || res.Error != nil {
		t.Fatalf("POST rebuild?wait=1: %d %s, want 200 with exit_code 0", r.status, r.body)
	}
	// Records the follower applies.
	more := records(2, 30, 12)
	produce(t, topic, more)
	want := latestOracle(latestOracle(oracle{}, first), more)
	hw := highs(t, topic, 1)
	waitFor(t, "the follower to apply the new records", 60*time.Second, func() bool {
		return caughtUp(d.c.table(t, "live"), hw)
	})
	// Reads of each kind the read-latency panel selects.
	rows, _, _ := d.c.scan(t, "live", 1000)
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("rows %v\noracle %v", rows, want)
	}
	for _, k := range sortedKeys(want)[:3] {
		if r := d.c.get(t, "/v1/tables/live/keys/"+k); r.status != http.StatusOK || string(r.body) != want[k] {
			t.Fatalf("GET key %s: %d %q, oracle %q", k, r.status, r.body, want[k])
		}
	}
	d.c.table(t, "live")
	// The follow series are there once the follower has seen the
	// partition's high watermark.
	var series seriesSet
	waitFor(t, "the follow lag series", 30*time.Second, func() bool {
		series = flatten(scrapeMetrics(t, d.c), targetLabels)
		return len(series.match(selector{name: "kmaterialize_follow_lag_records"})) > 0
	})
	vars := map[string]string{
		"instance":        regexp.QuoteMeta(targetLabels["instance"]),
		"table":           "(live)", // a multi-value variable, as Grafana formats it for a regex
		"__rate_interval": "1m",
		"__interval":      "15s",
		"__range":         "6h",
	}
	for _, p := range checkDashboard(raw, vars, series) {
		t.Error(p)
	}
}

// TestDashboardCheckFindsMistakes: the check reports a misspelled metric,
// a label a query groups by that the metric does not have, a matcher no
// series satisfies, a panel without a target and a query it cannot read,
// each naming the panel.
func TestDashboardCheckFindsMistakes(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	series := flatten(map[string]*dto.MetricFamily{}, nil)
	series.add("kmaterialize_table_keys", map[string]string{"table": "live", "instance": "i"})
	series.add("kmaterialize_http_request_duration_seconds_bucket", map[string]string{"route": "GET /v1/tables/{table}/rows", "code": "200", "le": "0.1", "instance": "i"})
	series.add("kmaterialize_db_file_size_bytes", map[string]string{"instance": "i"})
	series.add("kmaterialize_table_generation", map[string]string{"table": "live", "instance": "i"})
	vars := map[string]string{"instance": "i", "table": "(live)", "__rate_interval": "1m", "__range": "6h", "__interval": "15s"}
	one := func(title, expr string) []byte {
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		d["panels"] = []any{map[string]any{"type": "timeseries", "title": title,
			"datasource": map[string]any{"type": "prometheus", "uid": "${datasource}"},
			"targets":    []any{map[string]any{"expr": expr, "refId": "A"}}}}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if p := checkDashboard(one("Good", `sum by (instance, table) (kmaterialize_table_keys{instance=~"$instance", table=~"$table"})`), vars, series); len(p) != 0 {
		t.Fatalf("a query of exported series: %v", p)
	}
	for _, c := range []struct{ title, expr, want string }{
		{"Misspelled", `kmaterialize_table_key{table=~"$table"}`, `kmaterialize_table_key is not exported`},
		{"By label", `sum by (tabel) (kmaterialize_table_keys)`, `groups by "tabel"`},
		{"Without label", `sum without (partition) (kmaterialize_table_keys)`, `groups by "partition"`},
		{"Matcher label", `kmaterialize_table_keys{tabel="live"}`, `no series of kmaterialize_table_keys matches`},
		{"Matcher value", `kmaterialize_table_keys{table="other"}`, `no series of kmaterialize_table_keys matches`},
		{"Route regex", `histogram_quantile(0.99, sum by (le) (rate(kmaterialize_http_request_duration_seconds_bucket{route=~"GET /v1/table/.*"}[5m])))`, `no series of kmaterialize_http_request_duration_seconds_bucket matches`},
		{"Histogram suffix", `rate(kmaterialize_http_request_duration_seconds_sum[5m])`, `kmaterialize_http_request_duration_seconds_sum is not exported`},
		{"Unread", `kmaterialize_table_keys @ 100`, `cannot read`},
		{"Undefined variable", `kmaterialize_table_keys{table=~"$tables"}`, `variable`},
	} {
		p := checkDashboard(one(c.title, c.expr), vars, series)
		if len(p) == 0 || !strings.Contains(strings.Join(p, "\n"), c.want) || !strings.Contains(p[0], `"`+c.title+`"`) {
			t.Errorf("%s: %s: problems %q, want one with %q naming the panel", c.title, c.expr, p, c.want)
		}
	}
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	d["panels"] = []any{map[string]any{"type": "stat", "title": "No target", "targets": []any{}}}
	b, _ := json.Marshal(d)
	if p := checkDashboard(b, vars, series); len(p) == 0 || !strings.Contains(p[0], "no target") {
		t.Errorf("a panel without targets: problems %q", p)
	}
}

// checkDashboard returns what is wrong with the dashboard raw for series:
// its structure (panels with a title, the Prometheus data source variable,
// at least one target each) and each query (after vars are substituted)
// whose selectors match no series or which groups by a label the series
// matched lack.
func checkDashboard(raw []byte, vars map[string]string, series seriesSet) []string {
	var dash struct {
		Title         string      `json:"title"`
		SchemaVersion int         `json:"schemaVersion"`
		Panels        []dashPanel `json:"panels"`
		Templating    struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			}
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		return []string{fmt.Sprintf("%s: %v", dashboardPath, err)}
	}
	var problems []string
	if dash.Title == "" || dash.SchemaVersion < 36 {
		problems = append(problems, fmt.Sprintf("title %q, schemaVersion %d: want a title and schemaVersion 36 or later", dash.Title, dash.SchemaVersion))
	}
	known := map[string]bool{}
	for k := range vars {
		known[k] = true
	}
	var queries []struct{ where, expr string }
	hasDS := false
	for _, v := range dash.Templating.List {
		switch v.Type {
		case "datasource":
			hasDS = hasDS || (v.Name == "datasource" && string(v.Query) == `"prometheus"`)
		case "query":
			if !known[v.Name] {
				problems = append(problems, fmt.Sprintf("variable %q: the test gives it no value", v.Name))
			}
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil || q.Query == "" {
				problems = append(problems, fmt.Sprintf("variable %q: query %s: want {\"query\": \"label_values(...)\"}", v.Name, v.Query))
				continue
			}
			queries = append(queries, struct{ where, expr string }{"variable " + strconv.Quote(v.Name), q.Query})
		}
	}
	if !hasDS {
		problems = append(problems, `no "datasource" variable of type datasource with query "prometheus"`)
	}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			where := "panel " + strconv.Quote(p.Title)
			if p.Title == "" {
				problems = append(problems, fmt.Sprintf("a %s panel without a title", p.Type))
			}
			if len(p.Targets) == 0 {
				problems = append(problems, where+": no target")
			}
			if p.Datasource.UID != "${datasource}" {
				problems = append(problems, fmt.Sprintf("%s: data source %q, want ${datasource}", where, p.Datasource.UID))
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					problems = append(problems, fmt.Sprintf("%s: target %s has no expr", where, tg.RefID))
					continue
				}
				queries = append(queries, struct{ where, expr string }{where, tg.Expr})
			}
		}
	}
	walk(dash.Panels)
	for _, q := range queries {
		for _, p := range checkQuery(q.expr, vars, series) {
			problems = append(problems, fmt.Sprintf("%s: %s: %s", q.where, q.expr, p))
		}
	}
	return problems
}

type dashPanel struct {
	Type, Title string
	Datasource  struct{ Type, UID string }
	Targets     []struct{ Expr, RefID string }
	Panels      []dashPanel
}

// checkQuery checks one query: its variables are known, it reads, each
// selector matches a series, each label grouped by is on a series its
// aggregation's argument selects.
func checkQuery(expr string, vars map[string]string, series seriesSet) []string {
	var problems []string
	sub := regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`).ReplaceAllStringFunc(expr, func(m string) string {
		name := strings.Trim(m, "${}")
		v, ok := vars[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("variable $%s: not defined", name))
			return m
		}
		return v
	})
	if len(problems) > 0 {
		return problems
	}
	q, err := readQuery(sub)
	if err != nil {
		return []string{fmt.Sprintf("cannot read %q: %v", sub, err)}
	}
	for _, s := range q.selectors {
		if !series.has(s.name) {
			problems = append(problems, fmt.Sprintf("%s is not exported", s.name))
			continue
		}
		if len(series.match(s)) == 0 {
			problems = append(problems, fmt.Sprintf("no series of %s matches %s", s.name, s))
		}
	}
	if len(problems) > 0 {
		return problems // the groupings' labels would be missing for the same reason
	}
	for _, g := range q.groupings {
		labels := map[string]bool{}
		for _, s := range g.selectors {
			for _, ls := range series.match(q.selectors[s]) {
				for l := range ls {
					labels[l] = true
				}
			}
		}
		for _, l := range g.labels {
			if !labels[l] {
				problems = append(problems, fmt.Sprintf("%s groups by %q, which no series it aggregates has", g.op, l))
			}
		}
	}
	return problems
}

// selector is a PromQL instant or range vector selector: a metric name
// and label matchers.
type selector struct {
	name     string
	matchers []matcher
}

type matcher struct{ label, op, value string }

func (s selector) String() string {
	var b strings.Builder
	b.WriteString(s.name + "{")
	for i, m := range s.matchers {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(m.label + m.op + strconv.Quote(m.value))
	}
	return b.String() + "}"
}

// grouping is an aggregation's by or without list and the selectors (by
// index) inside its argument.
type grouping struct {
	op        string
	labels    []string
	selectors []int
}

type query struct {
	selectors []selector
	groupings []grouping
}

// The PromQL functions and aggregations the reader accepts.
var (
	promFunctions = map[string]bool{"rate": true, "irate": true, "increase": true, "delta": true, "deriv": true,
		"histogram_quantile": true, "time": true, "abs": true, "clamp_min": true, "clamp_max": true, "avg_over_time": true, "max_over_time": true, "min_over_time": true, "resets": true, "changes": true, "vector": true, "scalar": true}
	promAggregations = map[string]bool{"sum": true, "avg": true, "min": true, "max": true, "count": true, "topk": true, "bottomk": true, "group": true}
)

// token is one PromQL token: kind is "ident", "string", "number",
// "range" (a [...] duration, kept whole) or the punctuation itself.
type token struct{ kind, text string }

var tokenRE = regexp.MustCompile(`^(?:` +
	`(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)` +
	`|(?P<string>"(?:[^"\\]|\\.)*")` +
	`|(?P<number>[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)` +
	`|(?P<range>\[[0-9]+[smhdwy]\])` +
	`|(?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>(){},=])` +
	`)`)

func tokenize(s string) ([]token, error) {
	var out []token
	names := tokenRE.SubexpNames()
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		m := tokenRE.FindStringSubmatchIndex(s)
		if m == nil {
			return nil, fmt.Errorf("at %q", s)
		}
		for i := 1; i < len(names); i++ {
			if m[2*i] >= 0 {
				out = append(out, token{kind: names[i], text: s[m[2*i]:m[2*i+1]]})
				if names[i] == "op" {
					out[len(out)-1].kind = out[len(out)-1].text
				}
				break
			}
		}
		s = s[m[1]:]
	}
	return out, nil
}

// reader is a recursive-descent reader of the PromQL subset.
type reader struct {
	toks []token
	pos  int
	q    query
}

func readQuery(s string) (query, error) {
	toks, err := tokenize(s)
	if err != nil {
		return query{}, err
	}
	r := &reader{toks: toks}
	if err := r.expr(); err != nil {
		return query{}, err
	}
	if r.pos != len(r.toks) {
		return query{}, fmt.Errorf("unexpected %q", r.toks[r.pos].text)
	}
	return r.q, nil
}

func (r *reader) peek() token {
	if r.pos < len(r.toks) {
		return r.toks[r.pos]
	}
	return token{kind: "end"}
}

func (r *reader) next() token { t := r.peek(); r.pos++; return t }

func (r *reader) want(kind string) (token, error) {
	t := r.next()
	if t.kind != kind {
		return t, fmt.Errorf("want %s, got %q", kind, t.text)
	}
	return t, nil
}

// expr: operand (binop operand)*.
func (r *reader) expr() error {
	if err := r.operand(); err != nil {
		return err
	}
	for {
		switch r.peek().kind {
		case "+", "-", "*", "/", "%", "^", "==", "!=", "<", ">", "<=", ">=":
			r.next()
			if err := r.operand(); err != nil {
				return err
			}
		case "ident":
			if w := r.peek().text; w == "and" || w == "or" || w == "unless" {
				r.next()
				if err := r.operand(); err != nil {
					return err
				}
				continue
			}
			return nil
		default:
			return nil
		}
	}
}

func (r *reader) operand() error {
	t := r.next()
	switch t.kind {
	case "number", "string":
		return nil
	case "-", "+":
		return r.operand()
	case "(":
		if err := r.expr(); err != nil {
			return err
		}
		_, err := r.want(")")
		return err
	case "ident":
		switch {
		case promAggregations[t.text]:
			return r.aggregation(t.text)
		case t.text == "label_values" && r.peek().kind == "(":
			return r.labelValues()
		case promFunctions[t.text] && r.peek().kind == "(":
			r.next()
			return r.args()
		}
		return r.selector(t.text)
	}
	return fmt.Errorf("unexpected %q", t.text)
}

// labelValues is Grafana's label_values(selector, label) of a variable's
// query: the label must be on a series the selector matches.
func (r *reader) labelValues() error {
	r.next()
	name, err := r.want("ident")
	if err != nil {
		return err
	}
	if err := r.selector(name.text); err != nil {
		return err
	}
	if _, err := r.want(","); err != nil {
		return err
	}
	l, err := r.want("ident")
	if err != nil {
		return err
	}
	r.q.groupings = append(r.q.groupings, grouping{op: "label_values", labels: []string{l.text}, selectors: []int{len(r.q.selectors) - 1}})
	_, err = r.want(")")
	return err
}

// args reads a call's arguments up to its ")".
func (r *reader) args() error {
	if r.peek().kind == ")" {
		r.next()
		return nil
	}
	for {
		if err := r.expr(); err != nil {
			return err
		}
		switch t := r.next(); t.kind {
		case ",":
		case ")":
			return nil
		default:
			return fmt.Errorf("in the arguments: unexpected %q", t.text)
		}
	}
}

// aggregation: op [by|without (labels)] (args) [by|without (labels)].
func (r *reader) aggregation(op string) error {
	g := grouping{op: op}
	readLabels := func() error {
		mod := r.next().text
		g.op = op + " " + mod
		if _, err := r.want("("); err != nil {
			return err
		}
		for r.peek().kind != ")" {
			l, err := r.want("ident")
			if err != nil {
				return err
			}
			g.labels = append(g.labels, l.text)
			if r.peek().kind == "," {
				r.next()
			}
		}
		r.next()
		return nil
	}
	isMod := func() bool { w := r.peek().text; return r.peek().kind == "ident" && (w == "by" || w == "without") }
	if isMod() {
		if err := readLabels(); err != nil {
			return err
		}
	}
	if _, err := r.want("("); err != nil {
		return err
	}
	first := len(r.q.selectors)
	if err := r.args(); err != nil {
		return err
	}
	if isMod() {
		if len(g.labels) > 0 {
			return fmt.Errorf("%s: two label lists", op)
		}
		if err := readLabels(); err != nil {
			return err
		}
	}
	for i := first; i < len(r.q.selectors); i++ {
		g.selectors = append(g.selectors, i)
	}
	if len(g.labels) > 0 {
		r.q.groupings = append(r.q.groupings, g)
	}
	return nil
}

// selector: name [{matchers}] [range].
func (r *reader) selector(name string) error {
	s := selector{name: name}
	if r.peek().kind == "{" {
		r.next()
		for r.peek().kind != "}" {
			l, err := r.want("ident")
			if err != nil {
				return err
			}
			op := r.next()
			switch op.kind {
			case "=", "!=", "=~", "!~":
			default:
				return fmt.Errorf("matcher %s: operator %q", l.text, op.text)
			}
			v, err := r.want("string")
			if err != nil {
				return err
			}
			val, err := strconv.Unquote(v.text)
			if err != nil {
				return fmt.Errorf("matcher %s: %v", l.text, err)
			}
			s.matchers = append(s.matchers, matcher{l.text, op.kind, val})
			if r.peek().kind == "," {
				r.next()
			}
		}
		r.next()
	}
	if r.peek().kind == "range" {
		r.next()
	}
	r.q.selectors = append(r.q.selectors, s)
	return nil
}

// seriesSet is the series of a scrape as Prometheus stores them: a
// histogram as NAME_bucket (with le), NAME_sum and NAME_count, a summary
// as NAME (with quantile), NAME_sum and NAME_count; each with the target
// labels added.
type seriesSet map[string][]map[string]string

func flatten(fams map[string]*dto.MetricFamily, target map[string]string) seriesSet {
	s := seriesSet{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			base := map[string]string{}
			for k, v := range target {
				base[k] = v
			}
			for _, l := range m.GetLabel() {
				base[l.GetName()] = l.GetValue()
			}
			with := func(k, v string) map[string]string {
				c := map[string]string{k: v}
				for bk, bv := range base {
					c[bk] = bv
				}
				return c
			}
			switch {
			case m.Histogram != nil:
				for _, b := range m.GetHistogram().GetBucket() {
					s.add(name+"_bucket", with("le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))
				}
				s.add(name+"_bucket", with("le", "+Inf"))
				s.add(name+"_sum", base)
				s.add(name+"_count", base)
			case m.Summary != nil:
				for _, q := range m.GetSummary().GetQuantile() {
					s.add(name, with("quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)))
				}
				s.add(name+"_sum", base)
				s.add(name+"_count", base)
			default:
				s.add(name, base)
			}
		}
	}
	return s
}

func (s seriesSet) add(name string, labels map[string]string) { s[name] = append(s[name], labels) }

func (s seriesSet) has(name string) bool { return len(s[name]) > 0 }

// match is the series of sel's metric that its matchers select, with
// Prometheus' semantics: a label a series lacks is the empty string, and
// a regular expression is anchored at both ends.
func (s seriesSet) match(sel selector) []map[string]string {
	var out []map[string]string
	for _, ls := range s[sel.name] {
		ok := true
		for _, m := range sel.matchers {
			v := ls[m.label]
			switch m.op {
			case "=":
				ok = v == m.value
			case "!=":
				ok = v != m.value
			case "=~", "!~":
				re, err := regexp.Compile("^(?:" + m.value + ")$")
				ok = err == nil && re.MatchString(v) == (m.op == "=~")
			}
			if !ok {
				break
			}
		}
		if ok {
			out = append(out, ls)
		}
	}
	return out
}
