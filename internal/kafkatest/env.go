package kafkatest

import (
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The variables that name a running broker to a test process: cmd/kafkatest
// prints them, scripts/test-kafka exports them, FromEnv reads them.
const (
	EnvAddr          = "KMATERIALIZE_TEST_KAFKA"                // PLAINTEXT HOST:PORT (User:ANONYMOUS, a super user)
	EnvSASLAddr      = "KMATERIALIZE_TEST_KAFKA_SASL"           // SASL_PLAINTEXT HOST:PORT, SCRAM-SHA-512
	EnvUser          = "KMATERIALIZE_TEST_KAFKA_USER"           // the tool's least-privilege SCRAM user
	EnvPassword      = "KMATERIALIZE_TEST_KAFKA_PASSWORD"       // its password
	EnvAdminUser     = "KMATERIALIZE_TEST_KAFKA_ADMIN_USER"     // a SCRAM super user, for fixtures and ACLs
	EnvAdminPassword = "KMATERIALIZE_TEST_KAFKA_ADMIN_PASSWORD" // its password
	EnvVersion       = "KMATERIALIZE_TEST_KAFKA_VERSION"        // Apache Kafka's version
)

// Endpoint is how to reach a broker and who to be on it. It is all a test
// needs of a broker that another process started.
type Endpoint struct {
	Addr     string // PLAINTEXT listener; its principal is User:ANONYMOUS, a super user
	SASLAddr string // SASL_PLAINTEXT listener, SCRAM-SHA-512 only

	AdminUser, AdminPassword string // a super user on SASLAddr
	ToolUser, ToolPassword   string // no ACL until a test grants one

	Version string // Apache Kafka's version
}

// Environ returns the variables that name e, as KEY=VALUE.
func (e Endpoint) Environ() []string {
	return []string{
		EnvAddr + "=" + e.Addr,
		EnvSASLAddr + "=" + e.SASLAddr,
		EnvUser + "=" + e.ToolUser,
		EnvPassword + "=" + e.ToolPassword,
		EnvAdminUser + "=" + e.AdminUser,
		EnvAdminPassword + "=" + e.AdminPassword,
		EnvVersion + "=" + e.Version,
	}
}

// FromEnv returns the broker the environment names. ok is false when
// KMATERIALIZE_TEST_KAFKA is unset; an error means it is set but another of
// the variables is missing (a half-set environment would test the wrong
// thing quietly).
func FromEnv() (e Endpoint, ok bool, err error) {
	e.Addr = os.Getenv(EnvAddr)
	if e.Addr == "" {
		return Endpoint{}, false, nil
	}
	for _, v := range []struct {
		name string
		dst  *string
	}{
		{EnvSASLAddr, &e.SASLAddr},
		{EnvUser, &e.ToolUser},
		{EnvPassword, &e.ToolPassword},
		{EnvAdminUser, &e.AdminUser},
		{EnvAdminPassword, &e.AdminPassword},
		{EnvVersion, &e.Version},
	} {
		*v.dst = os.Getenv(v.name)
		if *v.dst == "" {
			return Endpoint{}, false, fmt.Errorf("kafkatest: %s is set but %s is not (start the broker with scripts/test-kafka or cmd/kafkatest)", EnvAddr, v.name)
		}
	}
	return e, true, nil
}

// Client returns a franz-go client on the PLAINTEXT listener; opts are
// appended.
func (e Endpoint) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.Addr)}, opts...)...)
}

// SASLClient returns a franz-go client on the SASL_PLAINTEXT listener
// authenticated as user with SCRAM-SHA-512; opts are appended.
func (e Endpoint) SASLClient(user, password string, opts ...kgo.Opt) (*kgo.Client, error) {
	mech := scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.SASLAddr), kgo.SASL(mech)}, opts...)...)
}
