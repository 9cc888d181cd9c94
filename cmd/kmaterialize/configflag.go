package main

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/materialize"
)

// configEnv names the config file when --config is not given.
const configEnv = "KMATERIALIZE_CONFIG"

// Metadata keys of the loaded config (one App per run, so per invocation).
const (
	metaConfig = "config"
	metaTable  = "config-table"
)

// configFlag is --config on every command that takes --db, --brokers or -X.
func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", EnvVars: []string{configEnv},
		Usage: "YAML config `FILE` (as kmaterialize serve reads) supplying --db, --brokers, -X and, with --table, the table's topic and fold options; flags win over it"}
}

// configHelp is the paragraph on --config in the help of the commands
// that take it.
const configHelp = `
With --config FILE (or KMATERIALIZE_CONFIG=FILE), the file supplies the
database, the brokers and the librdkafka properties (with ${NAME} taken from
the environment in db, socket, brokers, properties and catalog); rebuild --table NAME also takes the table's topic, fold and
options from it, so it builds exactly the table the daemon builds. A flag
given on the command line (or through its environment variable) wins over
the file.`

// withConfig makes cmd read --config (or KMATERIALIZE_CONFIG) before its
// action: a file that does not load is exit 2 naming the line, before any
// work. It is the one place where the file's values become flag values, so
// the commands read --db, --brokers, --topic as they always did.
func withConfig(cmd *cli.Command) {
	// serve reads the file itself, at start and again on SIGHUP.
	if cmd.Action == nil || !hasFlag(cmd, "config") || cmd.Name == "serve" {
		return
	}
	cmd.Description += "\n" + configHelp
	action := cmd.Action
	cmd.Action = func(c *cli.Context) error {
		path := c.String("config")
		if path == "" {
			return action(c)
		}
		cfg, err := config.Load(path)
		if err != nil {
			return err
		}
		c.App.Metadata[metaConfig] = cfg
		redactorOf(c).Add(cfg.Secrets()...)
		if err := applyConfig(c, cmd, cfg); err != nil {
			return err
		}
		return action(c)
	}
}

// applyConfig sets the flags the user did not set from cfg.
func applyConfig(c *cli.Context, cmd *cli.Command, cfg *config.Config) error {
	set := func(flag, value string) error {
		if value == "" || !hasFlag(cmd, flag) || c.IsSet(flag) {
			return nil
		}
		return c.Set(flag, value)
	}
	if err := set("db", cfg.DB); err != nil {
		return err
	}
	if err := set("brokers", cfg.Kafka.Brokers); err != nil {
		return err
	}
	// Only a command that builds a table (it has --topic and --table)
	// takes a table's definition from the file; the query commands read
	// any table the database holds.
	if !hasFlag(cmd, "topic") || !hasFlag(cmd, "table") {
		return nil
	}
	name := c.String("table")
	if name == "" {
		if c.IsSet("topic") || len(cfg.Tables) == 0 {
			return nil
		}
		return &usageError{msg: fmt.Sprintf("--config %s: name the table to %s with --table (the file has %s)",
			cfg.Path, cmd.Name, strings.Join(cfg.Names(), ", ")),
			hint: fmt.Sprintf("kmaterialize %s --config %s --table %s", cmd.Name, cfg.Path, cfg.Names()[0])}
	}
	spec, err := cfg.Table(name)
	if errors.Is(err, config.ErrUnknownTable) {
		if c.IsSet("topic") {
			// The flags define the table; the file gives the connection.
			return nil
		}
		return &usageError{msg: err.Error(),
			hint: "--table with one of the config's tables, or --topic TOPIC to define the table with flags"}
	}
	if err != nil {
		return err
	}
	c.App.Metadata[metaTable] = spec
	return set("topic", spec.Topic)
}

// configTable returns the config file's definition of --table, when
// --config names a file that defines it.
func configTable(c *cli.Context) (materialize.Spec, bool) {
	s, ok := c.App.Metadata[metaTable].(materialize.Spec)
	return s, ok
}

// configProps returns the config file's librdkafka properties (nil without
// a file), which -X properties override key by key.
func configProps(c *cli.Context) map[string]string {
	if cfg, ok := c.App.Metadata[metaConfig].(*config.Config); ok {
		return maps.Clone(cfg.Kafka.Properties)
	}
	return nil
}

func hasFlag(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}
