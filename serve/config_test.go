package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

func noBuild(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
	return materialize.Report{}, errors.New("not built in this test")
}

// TestNewRefusesBadConfig: each bad value is a *ConfigError naming its
// field; good ones pass.
func TestNewRefusesBadConfig(t *testing.T) {
	ok := func(c *Config) {}
	tbl := func(name, schedule string) Table { return Table{Name: name, Schedule: schedule, Build: noBuild} }
	for _, c := range []struct {
		name  string
		edit  func(*Config)
		field string // "" when New must accept it
	}{
		{"defaults", ok, ""},
		{"no db", func(c *Config) { c.DBPath = "" }, "db"},
		{"mode with setuid", func(c *Config) { c.SocketMode = os.ModeSetuid | 0o600 }, "socket_mode"},
		{"mode owner cannot write", func(c *Config) { c.SocketMode = 0o444 }, "socket_mode"},
		{"mode 0660", func(c *Config) { c.SocketMode = 0o660 }, ""},
		{"unknown group", func(c *Config) { c.SocketGroup = "no-such-group-kmaterialize" }, "socket_group"},
		{"listen loopback", func(c *Config) { c.Listen = "127.0.0.1:9466" }, ""},
		{"listen localhost", func(c *Config) { c.Listen = "localhost:0" }, ""},
		{"listen ipv6 loopback", func(c *Config) { c.Listen = "[::1]:0" }, ""},
		{"listen all interfaces", func(c *Config) { c.Listen = ":9466" }, "listen"},
		{"listen remote", func(c *Config) { c.Listen = "0.0.0.0:9466" }, "listen"},
		{"listen remote, allowed, no token", func(c *Config) { c.Listen, c.AllowRemote = "0.0.0.0:9466", true }, "listen"},
		{"listen remote, token, not allowed", func(c *Config) { c.Listen, c.AdminToken = "0.0.0.0:9466", "x" }, "listen"},
		{"listen remote, allowed with token, no TLS", func(c *Config) { c.Listen, c.AllowRemote, c.AdminToken = "0.0.0.0:9466", true, "x" }, "allow_remote"},
		{"listen remote, allowed with token, plaintext allowed", func(c *Config) {
			c.Listen, c.AllowRemote, c.AdminToken, c.AllowPlaintextTokens = "0.0.0.0:9466", true, "x", true
		}, ""},
		{"listen remote, read token only", func(c *Config) {
			c.Listen, c.AllowRemote, c.ReadToken, c.AllowPlaintextTokens = "0.0.0.0:9466", true, "r", true
		}, ""},
		{"loopback, allow_remote, no token", func(c *Config) { c.Listen, c.AllowRemote, c.AllowPlaintextTokens = "127.0.0.1:0", true, true }, "listen"},
		{"read token equals admin token", func(c *Config) {
			c.Listen, c.AllowRemote, c.AdminToken, c.ReadToken, c.AllowPlaintextTokens = "0.0.0.0:9466", true, "same", "same", true
		}, "read_token"},
		{"metrics token equals admin token", func(c *Config) {
			c.Listen, c.AllowRemote, c.AdminToken, c.MetricsToken, c.AllowPlaintextTokens = "0.0.0.0:9466", true, "same", "same", true
		}, "metrics_token"},
		{"token with a space", func(c *Config) {
			c.Listen, c.AllowRemote, c.AdminToken, c.AllowPlaintextTokens = "0.0.0.0:9466", true, "two words", true
		}, "admin_token"},
		{"read token without allow_remote", func(c *Config) { c.Listen, c.ReadToken = "127.0.0.1:0", "r" }, "read_token"},
		{"metrics token without allow_remote", func(c *Config) { c.Listen, c.MetricsToken = "127.0.0.1:0", "m" }, "metrics_token"},
		{"allow_remote without listen", func(c *Config) { c.AllowRemote, c.AdminToken, c.AllowPlaintextTokens = true, "x", true }, "allow_remote"},
		{"tls without listen", func(c *Config) { c.TLSCert, c.TLSKey = "c.pem", "k.pem" }, "tls_cert"},
		{"tls cert without key", func(c *Config) { c.Listen, c.TLSCert = "127.0.0.1:0", "c.pem" }, "tls_cert"},
		{"tls files missing", func(c *Config) {
			c.Listen, c.TLSCert, c.TLSKey = "127.0.0.1:0", "/nonexistent/c.pem", "/nonexistent/k.pem"
		}, "tls_cert"},
		{"listen not host:port", func(c *Config) { c.Listen = "9466" }, "listen"},
		{"every", func(c *Config) { c.Tables = []Table{tbl("a", "@every 10m")} }, ""},
		{"cron", func(c *Config) { c.Tables = []Table{tbl("a", "*/5 * * * 1-5")} }, ""},
		{"every negative", func(c *Config) { c.Tables = []Table{tbl("a", "@every -1m")} }, "tables[0].schedule"},
		{"every garbage", func(c *Config) { c.Tables = []Table{tbl("a", "@every often")} }, "tables[0].schedule"},
		{"cron 3 fields", func(c *Config) { c.Tables = []Table{tbl("a", "* * *")} }, "tables[0].schedule"},
		{"cron 6 fields", func(c *Config) { c.Tables = []Table{tbl("a", "0 * * * * *")} }, "tables[0].schedule"},
		{"cron out of range", func(c *Config) { c.Tables = []Table{tbl("a", "61 * * * *")} }, "tables[0].schedule"},
		{"repeated table", func(c *Config) { c.Tables = []Table{tbl("a", ""), tbl("a", "")} }, "tables[1].name"},
		{"empty table name", func(c *Config) { c.Tables = []Table{tbl("", "")} }, "tables[0].name"},
		{"no build", func(c *Config) { c.Tables = []Table{{Name: "a"}} }, "tables[0]"},
		{"large-answer limits", func(c *Config) { c.SpoolMaxBytes, c.MaxHeavyRequests, c.PageMaxBytes = 1<<20, 1, 1 }, ""},
		{"negative spool limit", func(c *Config) { c.SpoolMaxBytes = -1 }, "spool_max_bytes"},
		{"negative heavy requests", func(c *Config) { c.MaxHeavyRequests = -1 }, "max_heavy_requests"},
		{"negative page budget", func(c *Config) { c.PageMaxBytes = -1 }, "page_max_bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{DBPath: "/nonexistent/t.db"}
			c.edit(&cfg)
			_, err := New(cfg)
			var ce *ConfigError
			switch {
			case c.field == "" && err != nil:
				t.Fatalf("New: %v, want it accepted", err)
			case c.field != "" && (!errors.As(err, &ce) || ce.Field != c.field):
				t.Fatalf("New: %v, want a *ConfigError for %s", err, c.field)
			}
		})
	}
}

// TestAdminTokenOnTCP: the TCP listener serves reads, metrics and health;
// a POST needs the admin token (403 without or with a wrong one), while the
// unix socket needs none.
func TestAdminTokenOnTCP(t *testing.T) {
	topic := newTopic(t)
	recs := records(1, 60, 20)
	produce(t, topic, recs)
	want := latestOracle(nil, recs)
	cfg := baseConfig(t, kafkaTable("t", topic, nil))
	cfg.Listen, cfg.AdminToken = "127.0.0.1:0", "s3cret-token"
	d := start(t, cfg)
	waitFor(t, "the first build", 60*time.Second, func() bool { return d.c.table(t, "t").State == StateReady })
	tc := tcpClient(t, d.s.TCPAddr().String())
	defer tc.hc.CloseIdleConnections()

	rows, _, _ := tc.scan(t, "t", 100)
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Fatalf("rows over TCP (-oracle +got):\n%s", diff)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/v1/tables", "/v1/tables/t/keys/k001", "/v1/tables/t/export"} {
		if r := tc.get(t, p); r.status != 200 {
			t.Fatalf("GET %s over TCP: %d %s", p, r.status, r.body)
		}
	}
	for _, auth := range []string{"", "Bearer wrong", "s3cret-token", "Basic s3cret-token", "Bearer s3cret-token-and-more"} {
		h := http.Header{}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		r := tc.do(t, "POST", "/v1/tables/t/rebuild", h)
		if e := r.apiErr(t); r.status != http.StatusForbidden || e.Code != api.CodeForbidden {
			t.Fatalf("POST over TCP with Authorization %q: %d %s, want 403", auth, r.status, r.body)
		}
		// A drop changes state too (the table is configured: with the
		// token it would be 409, so a 403 here is the token check's).
		r = tc.do(t, "DELETE", "/v1/tables/t", h)
		if e := r.apiErr(t); r.status != http.StatusForbidden || e.Code != api.CodeForbidden {
			t.Fatalf("DELETE over TCP with Authorization %q: %d %s, want 403", auth, r.status, r.body)
		}
	}
	if tj := d.c.table(t, "t"); tj.Run != nil {
		t.Fatalf("a refused request started run %+v", tj.Run)
	}
	r := tc.do(t, "POST", "/v1/tables/t/rebuild?wait=1", http.Header{"Authorization": {"Bearer s3cret-token"}})
	var res rebuildResult
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil || res.ExitCode != 0 {
		t.Fatalf("POST over TCP with the token: %d %s", r.status, r.body)
	}
	if r := d.c.do(t, "POST", "/v1/tables/t/rebuild?wait=1", nil); r.status != 200 {
		t.Fatalf("POST on the unix socket without a token: %d %s", r.status, r.body)
	}
}
