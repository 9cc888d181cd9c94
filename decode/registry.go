package decode

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
)

// Environment variables that supply the registry's URL and credentials
// (Registry.WithEnv). Credentials never come from the command line, where
// ps would show them.
const (
	EnvURL      = "KMATERIALIZE_SCHEMA_REGISTRY"
	EnvUser     = "KMATERIALIZE_SCHEMA_REGISTRY_USER"
	EnvPassword = "KMATERIALIZE_SCHEMA_REGISTRY_PASSWORD"
	EnvToken    = "KMATERIALIZE_SCHEMA_REGISTRY_TOKEN"
)

// redacted is what a credential is shown as.
const redacted = "[redacted]"

// Registry is how to reach the Schema Registry. Shown (String, GoString,
// MarshalJSON, and so %v and %+v), the password and the token are
// redacted, and so is any user information in the URL.
type Registry struct {
	// URL is the registry's base URL, e.g. http://registry:8081; several
	// comma-separated URLs are tried in turn.
	URL string
	// Username and Password are HTTP basic authentication (for
	// Confluent Cloud: the API key and secret).
	Username string
	Password string
	// BearerToken is a static bearer token (Authorization: Bearer), an
	// alternative to basic authentication.
	BearerToken string
	// Timeout bounds one request (connection and answer). Default 10s.
	Timeout time.Duration
}

// WithEnv returns r with the fields the environment sets
// (EnvURL, EnvUser, EnvPassword, EnvToken) replaced: the environment wins
// over a config file, as a flag's environment variable does.
func (r Registry) WithEnv(lookup func(string) (string, bool)) Registry {
	set := func(dst *string, name string) {
		if v, ok := lookup(name); ok && v != "" {
			*dst = v
		}
	}
	set(&r.URL, EnvURL)
	set(&r.Username, EnvUser)
	set(&r.Password, EnvPassword)
	set(&r.BearerToken, EnvToken)
	return r
}

// Check reports a registry setting that cannot work: a URL that is not
// http(s), a password without a user, or both basic and bearer
// authentication. An empty URL is not checked (no registry).
func (r Registry) Check() error {
	if r.URL == "" {
		return nil
	}
	for _, u := range strings.Split(r.URL, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return &SettingError{Msg: fmt.Sprintf("schema registry URL %q: want http://HOST:PORT or https://HOST:PORT", displayURL(u))}
		}
	}
	if r.Password != "" && r.Username == "" {
		return &SettingError{Msg: "schema registry password without a user name"}
	}
	if r.BearerToken != "" && (r.Username != "" || r.Password != "") {
		return &SettingError{Msg: "schema registry credentials: give either a user and password or a bearer token, not both"}
	}
	return nil
}

// displayURL is u without its user information (a password may be in it).
func displayURL(u string) string {
	var out []string
	for _, one := range strings.Split(u, ",") {
		one = strings.TrimSpace(one)
		p, err := url.Parse(one)
		if err != nil {
			// Not a URL: it may still hold user:password@; show no more
			// than the part after the last @.
			if i := strings.LastIndex(one, "@"); i >= 0 {
				one = redacted + "@" + one[i+1:]
			}
			out = append(out, one)
			continue
		}
		if p.User != nil {
			p.User = url.User(redacted)
		}
		out = append(out, p.String())
	}
	return strings.Join(out, ",")
}

// String shows the URL (without user information) and which credentials
// are set, never their values.
func (r Registry) String() string {
	auth := "none"
	switch {
	case r.BearerToken != "":
		auth = "bearer token " + redacted
	case r.Username != "":
		auth = "basic user " + r.Username + " password " + redacted
	}
	return fmt.Sprintf("{url %s, auth %s}", displayURL(r.URL), auth)
}

// GoString is String, so %#v does not show the credentials either.
func (r Registry) GoString() string { return r.String() }

// MarshalJSON shows the URL and the user name; the password and token as
// redacted when set.
func (r Registry) MarshalJSON() ([]byte, error) {
	shown := func(s string) string {
		if s == "" {
			return ""
		}
		return redacted
	}
	return json.Marshal(struct {
		URL         string `json:"url,omitempty"`
		Username    string `json:"username,omitempty"`
		Password    string `json:"password,omitempty"`
		BearerToken string `json:"bearer_token,omitempty"`
	}{displayURL(r.URL), r.Username, shown(r.Password), shown(r.BearerToken)})
}

// secrets returns the credential values, for scrubbing messages.
func (r Registry) secrets() []string {
	var out []string
	for _, s := range []string{r.Password, r.BearerToken} {
		if s != "" {
			out = append(out, s)
		}
	}
	if p, err := url.Parse(r.URL); err == nil && p.User != nil {
		if pw, ok := p.User.Password(); ok && pw != "" {
			out = append(out, pw)
		}
	}
	return out
}

// client returns confluent's registry client for r. The client caches
// schemas by id (and by GUID) for its life.
func (r Registry) client() (schemaregistry.Client, error) {
	var conf *schemaregistry.Config
	switch {
	case r.BearerToken != "":
		conf = schemaregistry.NewConfigWithBearerAuthentication(r.URL, r.BearerToken, "", "")
	case r.Username != "":
		conf = schemaregistry.NewConfigWithBasicAuthentication(r.URL, r.Username, r.Password)
	default:
		conf = schemaregistry.NewConfig(r.URL)
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	conf.ConnectionTimeoutMs = int(timeout.Milliseconds())
	conf.RequestTimeoutMs = int(timeout.Milliseconds())
	// A server error is retried by the client (with backoff); a refused
	// connection is not, and fails the run at once (exit 5).
	conf.MaxRetries = 2
	c, err := schemaregistry.NewClient(conf)
	if err != nil {
		return nil, &SettingError{Msg: "schema registry client: " + scrub(err.Error(), r.secrets()), Err: err}
	}
	return c, nil
}

// scrub replaces every secret in msg with redacted.
func scrub(msg string, secrets []string) string {
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, redacted)
	}
	return msg
}
