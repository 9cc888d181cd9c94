// Package listen owns the rules of the daemon's listeners, checked once for
// both places that take them: the config file (package config, which adds
// the line) and serve.Config (package serve). They are the TCP listener's
// address, tokens and TLS, and the unix socket's file mode.
package listen

import (
	"fmt"
	"net"
	"os"
)

// Settings are the TCP listener's settings, as the config file and
// serve.Config name them (listen, allow_remote, ...).
type Settings struct {
	Listen                              string // "" (none) or HOST:PORT
	AllowRemote                         bool
	AdminToken, ReadToken, MetricsToken string
	TLSCert, TLSKey                     string
	AllowPlaintextTokens                bool
}

// Problem is the first rule Settings break. Field is the setting's key in
// the config file (and serve.ConfigError's Field); Value, when not empty,
// is the value at fault. A token's value is never in it.
type Problem struct {
	Field  string
	Value  string
	Reason string
}

func (p *Problem) Error() string {
	if p.Value == "" {
		return p.Field + ": " + p.Reason
	}
	return fmt.Sprintf("%s %q: %s", p.Field, p.Value, p.Reason)
}

// Check returns the first rule s breaks, nil when none. A non-loopback
// address needs AllowRemote (reads over TCP are otherwise meant for this
// host); AllowRemote needs a token, and TLS unless AllowPlaintextTokens;
// tokens other than the admin token apply with AllowRemote only; every
// setting but the admin token applies to a TCP listener only.
func Check(s Settings) *Problem {
	if s.Listen == "" {
		for _, f := range []struct {
			key string
			on  bool
		}{{"allow_remote", s.AllowRemote}, {"read_token", s.ReadToken != ""}, {"metrics_token", s.MetricsToken != ""},
			{"tls_cert", s.TLSCert != ""}, {"tls_key", s.TLSKey != ""}, {"allow_plaintext_tokens", s.AllowPlaintextTokens}} {
			if f.on {
				return &Problem{Field: f.key, Reason: "applies to the TCP listener: set listen too"}
			}
		}
		return nil
	}
	host, port, err := net.SplitHostPort(s.Listen)
	if err != nil || port == "" {
		return &Problem{Field: "listen", Value: s.Listen, Reason: "want HOST:PORT, e.g. 127.0.0.1:9466"}
	}
	if !IsLoopback(host) && !s.AllowRemote {
		return &Problem{Field: "listen", Value: s.Listen,
			Reason: "not a loopback address: set allow_remote: true with a read_token or admin_token (and TLS) to serve other hosts, or listen on 127.0.0.1"}
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		p := &Problem{Field: "tls_cert", Value: s.TLSCert, Reason: "tls_cert and tls_key go together: set both or neither"}
		if s.TLSCert == "" {
			p.Field, p.Value = "tls_key", s.TLSKey
		}
		return p
	}
	if !s.AllowRemote {
		for _, f := range []struct{ key, value string }{{"read_token", s.ReadToken}, {"metrics_token", s.MetricsToken}} {
			if f.value != "" {
				return &Problem{Field: f.key, Reason: "applies with allow_remote: true only (without it, reads on a loopback listener are open)"}
			}
		}
		return nil
	}
	if s.AdminToken == "" && s.ReadToken == "" && s.MetricsToken == "" {
		return &Problem{Field: "listen", Value: s.Listen,
			Reason: "allow_remote: true needs a read_token or admin_token (or a metrics_token): every route but /healthz and /readyz asks for one"}
	}
	for _, f := range []struct{ key, value string }{{"admin_token", s.AdminToken}, {"read_token", s.ReadToken}, {"metrics_token", s.MetricsToken}} {
		for _, c := range f.value {
			if c <= ' ' || c > '~' {
				return &Problem{Field: f.key, Reason: "a token is printable ASCII without spaces (it is sent in an Authorization header)"}
			}
		}
	}
	if s.ReadToken != "" && (s.ReadToken == s.AdminToken || s.ReadToken == s.MetricsToken) {
		return &Problem{Field: "read_token", Reason: "must differ from admin_token and metrics_token"}
	}
	if s.MetricsToken != "" && s.MetricsToken == s.AdminToken {
		return &Problem{Field: "metrics_token", Reason: "must differ from admin_token"}
	}
	if s.TLSCert == "" && !s.AllowPlaintextTokens {
		return &Problem{Field: "allow_remote",
			Reason: "tokens would cross the network in clear text: set tls_cert and tls_key, or allow_plaintext_tokens: true for a network that is encrypted otherwise"}
	}
	return nil
}

// IsLoopback says whether host (of HOST:PORT) is this host only:
// "localhost" or a loopback IP. An empty host is every interface.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckSocketMode returns why m is not a unix socket's file mode, nil when
// it is one: permission bits only, with read and write for the daemon's
// own user.
func CheckSocketMode(m os.FileMode) *Problem {
	value := fmt.Sprintf("%#o", uint32(m))
	if m&^os.ModePerm != 0 {
		return &Problem{Field: "socket_mode", Value: value, Reason: "want permission bits only (at most 0777), e.g. \"0660\""}
	}
	if m&0o600 != 0o600 {
		return &Problem{Field: "socket_mode", Value: value, Reason: "the daemon's own user needs read and write (0600 at least)"}
	}
	return nil
}
