package listen

import (
	"os"
	"testing"
)

// TestCheck: each rule, broken alone, is reported on its own setting; the
// settings that break none pass.
func TestCheck(t *testing.T) {
	remote := func(s Settings) Settings {
		s.Listen, s.AllowRemote, s.AllowPlaintextTokens = "0.0.0.0:9466", true, true
		return s
	}
	cases := []struct {
		name  string
		s     Settings
		field string // "" passes
	}{
		{"none", Settings{}, ""},
		{"admin token without listen", Settings{AdminToken: "a"}, ""},
		{"loopback", Settings{Listen: "127.0.0.1:9466"}, ""},
		{"ipv6 loopback", Settings{Listen: "[::1]:0"}, ""},
		{"localhost", Settings{Listen: "localhost:0"}, ""},
		{"loopback with TLS", Settings{Listen: "127.0.0.1:0", TLSCert: "c", TLSKey: "k"}, ""},
		{"remote with a read token", remote(Settings{ReadToken: "r"}), ""},
		{"remote with TLS", Settings{Listen: "0.0.0.0:1", AllowRemote: true, AdminToken: "a", TLSCert: "c", TLSKey: "k"}, ""},
		{"allow_remote without listen", Settings{AllowRemote: true}, "allow_remote"},
		{"read_token without listen", Settings{ReadToken: "r"}, "read_token"},
		{"tls_key without listen", Settings{TLSKey: "k"}, "tls_key"},
		{"allow_plaintext_tokens without listen", Settings{AllowPlaintextTokens: true}, "allow_plaintext_tokens"},
		{"no port", Settings{Listen: "localhost"}, "listen"},
		{"empty port", Settings{Listen: "127.0.0.1:"}, "listen"},
		{"not loopback", Settings{Listen: "10.0.0.5:9466", AdminToken: "a"}, "listen"},
		{"every interface", Settings{Listen: ":9466"}, "listen"},
		{"tls_cert without tls_key", Settings{Listen: "127.0.0.1:0", TLSCert: "c"}, "tls_cert"},
		{"tls_key without tls_cert", Settings{Listen: "127.0.0.1:0", TLSKey: "k"}, "tls_key"},
		{"metrics_token without allow_remote", Settings{Listen: "127.0.0.1:0", MetricsToken: "m"}, "metrics_token"},
		{"allow_remote without a token", remote(Settings{}), "listen"},
		{"a token with a space", remote(Settings{AdminToken: "two words"}), "admin_token"},
		{"read_token is admin_token", remote(Settings{AdminToken: "s", ReadToken: "s"}), "read_token"},
		{"metrics_token is admin_token", remote(Settings{AdminToken: "s", MetricsToken: "s"}), "metrics_token"},
		{"plaintext tokens", Settings{Listen: "0.0.0.0:1", AllowRemote: true, AdminToken: "a"}, "allow_remote"},
	}
	for _, tc := range cases {
		p := Check(tc.s)
		switch {
		case tc.field == "" && p != nil:
			t.Errorf("%s: %v, want no problem", tc.name, p)
		case tc.field != "" && p == nil:
			t.Errorf("%s: no problem, want one on %s", tc.name, tc.field)
		case tc.field != "" && p.Field != tc.field:
			t.Errorf("%s: %v, want it on %s", tc.name, p, tc.field)
		}
	}
}

func TestCheckSocketMode(t *testing.T) {
	for m, ok := range map[os.FileMode]bool{0o600: true, 0o660: true, 0o777: true, 0o060: false, 0o400: false, os.ModeSetuid | 0o600: false} {
		if p := CheckSocketMode(m); (p == nil) != ok {
			t.Errorf("%v: %v, want ok %v", m, p, ok)
		}
	}
}
