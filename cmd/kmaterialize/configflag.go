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
// Its usage is generic here; withConfig rewrites it, once the command's
// flags are known, to say what the file supplies for that command.
func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", EnvVars: []string{configEnv},
		Usage: "YAML config `FILE` (as kmaterialize serve reads); flags win over it"}
}

// configSupplies lists what the config file gives cmd, as the help says it
// and as the fields are named in the file: only what cmd has a flag for
// (applyConfig and the commands' readers of the file take exactly these).
func configSupplies(cmd *cli.Command) (long, short []string) {
	add := func(l, s string) { long, short = append(long, l), append(short, s) }
	if hasFlag(cmd, "db") {
		add("the database (db)", "db")
	}
	if hasFlag(cmd, "brokers") {
		add("the brokers (kafka.brokers)", "kafka.brokers")
	}
	if hasFlag(cmd, "X") {
		add("the librdkafka properties (kafka.properties)", "kafka.properties")
	}
	if hasFlag(cmd, "schema-registry") {
		add("the Schema Registry (schema_registry)", "schema_registry")
	}
	if hasFlag(cmd, "topic") && hasFlag(cmd, "table") {
		add("with --table NAME, that table's topic, fold and options (tables)", "with --table, the table's definition")
	}
	return long, short
}

// and joins items as a sentence does: "a, b and c" ("a and, with x, c"
// when the last one is a condition).
func and(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	sep := " and "
	if strings.HasPrefix(items[len(items)-1], "with ") {
		sep = " and, "
	}
	return strings.Join(items[:len(items)-1], ", ") + sep + items[len(items)-1]
}

// configHelp is the paragraph on --config in the help of cmd, which takes
// it.
func configHelp(cmd *cli.Command) string {
	long, _ := configSupplies(cmd)
	text := "With --config FILE (or KMATERIALIZE_CONFIG=FILE), the file supplies " + and(long) + "."
	text += " ${NAME} is taken from the environment in db, socket, kafka.brokers, kafka.properties and catalog."
	if hasFlag(cmd, "topic") && hasFlag(cmd, "table") {
		text += " So " + cmd.Name + " --config FILE --table NAME builds exactly the table the daemon builds."
	}
	text += " A flag given on the command line (or through its environment variable) wins over the file."
	return "\n" + wrap(text, 76)
}

// wrap breaks text into lines of at most width bytes, at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n")
			n = 0
		} else if i > 0 {
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// withConfig makes cmd read --config (or KMATERIALIZE_CONFIG) before its
// action: a file that does not load is exit 2 naming the line, before any
// work. It is the one place where the file's values become flag values, so
// the commands read --db, --brokers, --topic as they always did.
func withConfig(cmd *cli.Command) {
	// serve reads the file itself, at start and again on SIGHUP.
	if cmd.Action == nil || !hasFlag(cmd, "config") || cmd.Name == "serve" {
		return
	}
	if f, ok := findFlag(cmd.Flags, "config").(*cli.StringFlag); ok {
		_, short := configSupplies(cmd)
		f.Usage = "YAML config `FILE` (as kmaterialize serve reads) supplying " + and(short) + "; flags win over it"
	}
	cmd.Description += "\n" + configHelp(cmd)
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
