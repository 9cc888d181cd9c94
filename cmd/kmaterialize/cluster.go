package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/store"
)

// This file is --cluster FILE on get, scan and tables: the command reads
// through the daemons the cluster file names (client.Cluster: shards and
// replicas, docs/shards.md "Cluster client") instead of one database.
// withCluster adds the flag; each command's action hands over to its
// ...ViaCluster here once its flags are read.

// clusterEnv names the cluster file when --cluster is not given.
const clusterEnv = "KMATERIALIZE_CLUSTER"

// clusterHelp is the paragraph on --cluster in the help of cmd (get, scan
// or tables), with its examples.
func clusterHelp(cmd string) string {
	what := map[string]string{
		"get": `A key is asked of a daemon holding its partition (of every shard in turn,
when the table has no partitioner), passing over a daemon that does not
answer for a replica; the keys of different shards are read at each shard's
own positions. --min-positions applies per partition, so each shard waits
for its own.`,
		"scan": `The shards' rows are merged in key order, each shard's pages from one
replica (the next one when it does not answer the first page). A partition
no daemon holds fails the scan (exit 1) before it prints anything.`,
		"tables": `Prints, per table, its partitions, the ready daemons holding each, the
holes (partitions no ready daemon holds), whether the table is fully served
(every partition held by a ready daemon), and each daemon's state; --format
json has the same as fields (fully_served, holes, partitions, daemons).`,
	}[cmd]
	examples := map[string]string{
		"get": `  $ kmaterialize get --cluster cluster.yaml --table balances acct-42
  $ kmaterialize get --cluster cluster.yaml --table balances --min-positions 2:1301 --wait 2s acct-42`,
		"scan": `  $ kmaterialize scan --cluster cluster.yaml --table balances --prefix acct-4 --format jsonl
  $ kmaterialize scan --cluster cluster.yaml --table balances --count`,
		"tables": `  $ kmaterialize tables --cluster cluster.yaml
  $ kmaterialize tables --cluster cluster.yaml --format json`,
	}[cmd]
	return `
--cluster FILE (or KMATERIALIZE_CLUSTER) reads through the daemons the
cluster file names instead of --db: shards (daemons holding some of the
topic's partitions) and their replicas.
` + what + `

The cluster file is YAML:
  daemons:
    - name: shard-a                          # optional
      address: http://10.0.0.2:9466          # a TCP listener ...
      token_file: /etc/kmaterialize/read-token
    - address: /run/kmaterialize/b.db.sock   # ... or a unix socket
See docs/shards.md ("Cluster client").

Examples with a cluster:
` + examples
}

// withCluster adds --cluster to cmd. --db, which cmd requires, is then
// required only without --cluster (checked here, where checkRequired
// would check it), and --cluster refuses --db, --socket and --config.
func withCluster(cmd *cli.Command) *cli.Command {
	cmd.Flags = append(cmd.Flags, &cli.StringFlag{Name: "cluster", EnvVars: []string{clusterEnv},
		Usage: "read through the daemons (shards and replicas) the cluster `FILE` names, instead of --db"})
	needDB := false
	if f, ok := findFlag(cmd.Flags, "db").(*cli.StringFlag); ok && f.Required {
		f.Required, needDB = false, true
		f.Usage += " (required without --cluster)"
	}
	cmd.UsageText += "\n" + clusterUsage(cmd.Name)
	cmd.Description += "\n" + clusterHelp(cmd.Name)
	action := cmd.Action
	cmd.Action = func(c *cli.Context) error {
		if c.String("cluster") == "" {
			if needDB && c.String("db") == "" {
				return &usageError{msg: "--db is required (or --cluster)", hint: "kmaterialize " + cmd.Name + " --help"}
			}
			return action(c)
		}
		for _, f := range []string{"db", "socket", "config"} {
			if c.IsSet(f) {
				return &usageError{msg: fmt.Sprintf("--cluster reads through the daemons of the cluster file: --%s does not apply", f),
					hint: "drop --db, --socket and --config (and KMATERIALIZE_DB, KMATERIALIZE_SOCKET, KMATERIALIZE_CONFIG) with --cluster"}
			}
		}
		return action(c)
	}
	return cmd
}

func clusterUsage(name string) string {
	switch name {
	case "get":
		return "kmaterialize get --cluster FILE --table TABLE [--format ...] [--base64] [--min-positions P:N,... [--wait D]] KEY... | -"
	case "scan":
		return "kmaterialize scan --cluster FILE --table TABLE [--prefix P] [--from K] [--to K] [--limit N] [--keys-only | --count] [--format ...] [--base64]"
	}
	return "kmaterialize tables --cluster FILE [--format text|json|jsonl]"
}

// clusterFile is --cluster, "" without it.
func clusterFile(c *cli.Context) string { return c.String("cluster") }

// openCluster loads --cluster's file.
func openCluster(c *cli.Context) (*client.Cluster, error) {
	path := clusterFile(c)
	ds, err := client.LoadClusterFile(path)
	if err == nil {
		var cl *client.Cluster
		if cl, err = client.NewCluster(ds, nil); err == nil {
			return cl, nil
		}
		err = fmt.Errorf("cluster file %s: %w", path, err)
	}
	return nil, &usageError{msg: err.Error(), hint: "fix the cluster file (kmaterialize " + c.Command.Name + " --help shows its format)"}
}

// getViaCluster is get through the cluster: each key read from a daemon
// holding it (at its shard's positions: keys of different shards are not
// read from one generation).
func getViaCluster(c *cli.Context, format, table string, keys [][]byte, opts client.GetOptions) error {
	cl, err := openCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	values := make([][]byte, len(keys))
	for i, k := range keys {
		v, err := cl.Get(c.Context, table, k, opts)
		switch {
		case client.IsCode(err, client.CodeKeyNotFound), client.IsCode(err, client.CodeBadKey):
			continue
		case err != nil:
			return clusterFail(err, table)
		}
		values[i] = v.Value.Value
		if values[i] == nil {
			values[i] = []byte{}
		}
	}
	return printValues(c, format, table, keys, values)
}

// scanViaCluster is scan through the cluster: the shards' rows merged in
// key order, held until the last one so that a failure prints nothing; a
// publish between two pages of a shard starts the scan over.
func scanViaCluster(c *cli.Context, table string, rng store.Range) error {
	cl, err := openCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	if c.Bool("count") {
		f, err := scanFormatter(c)
		if err != nil {
			return err
		}
		n, err := cl.Count(c.Context, table, client.CountOptions{Prefix: rng.Prefix, From: rng.From, To: rng.To})
		if err != nil {
			return clusterFail(err, table)
		}
		if l := int64(c.Int("limit")); l > 0 && n > l {
			n = l
		}
		if f.format == formatJSON || f.format == formatJSONL {
			_, err = fmt.Fprintf(stdoutOf(c), "{\"count\":%d}\n", n)
		} else {
			_, err = fmt.Fprintf(stdoutOf(c), "%d\n", n)
		}
		return err
	}
	return scanRouted(c, table, func(o client.RowsOptions, fn func(client.Row) error) error {
		o.Limit = c.Int("limit")
		return cl.Rows(c.Context, table, o, fn)
	}, func(err error) error { return clusterFail(err, table) }, rng)
}

// tablesViaCluster is tables through the cluster: per table, which daemons
// hold which partitions and which partitions no ready daemon holds.
func tablesViaCluster(c *cli.Context, format string) error {
	cl, err := openCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := cl.Tables(c.Context)
	if err != nil {
		return clusterFail(err, "")
	}
	return printClusterTables(stdoutOf(c), format, st)
}

// printClusterTables prints what Cluster.Tables found.
func printClusterTables(w io.Writer, format string, st client.ClusterStatus) error {
	switch format {
	case formatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	case formatJSONL:
		enc := json.NewEncoder(w)
		for _, t := range st.Tables {
			if err := enc.Encode(t); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, t := range st.Tables {
		fmt.Fprintf(tw, "table %s\n", t.Name)
		fmt.Fprintf(tw, "  topic:\t%s\n", t.Topic)
		fmt.Fprintf(tw, "  partitioner:\t%s\n", orNone(t.Partitioner))
		served := "fully served"
		if !t.FullyServed {
			served = "NOT fully served"
		}
		count := fmt.Sprint(t.PartitionsOfTopic)
		if t.PartitionsOfTopic == 0 {
			count = "unknown"
		}
		fmt.Fprintf(tw, "  partitions of topic:\t%s (%s)\n", count, served)
		if len(t.Holes) > 0 {
			fmt.Fprintf(tw, "  holes:\t%s (no ready daemon holds them)\n", partition.FormatSet(t.Holes))
		}
		if t.Conflict != "" {
			fmt.Fprintf(tw, "  conflict:\t%s\n", t.Conflict)
		}
		fmt.Fprintf(tw, "  partition\tready daemons\tnot ready\n")
		for _, p := range t.Partitions {
			ready := strings.Join(p.Ready, ", ")
			if ready == "" {
				ready = "(hole)"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\n", p.Partition, ready, strings.Join(p.NotReady, ", "))
		}
		fmt.Fprintf(tw, "  daemon\tpartitions\tgeneration\tstate\n")
		for _, d := range t.Daemons {
			state := d.State
			if d.Repartitioned {
				state += fmt.Sprintf(", repartitioned (the topic has %d partitions now)", d.LiveCount)
			}
			if !d.Ready {
				state += ", not ready"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", d.Daemon, orNone(partition.FormatSet(d.PartitionSet)), d.Generation, state)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "daemons\n")
	for _, d := range st.Daemons {
		state := "ready"
		switch {
		case d.Error != "":
			state = "not answering: " + d.Error
		case !d.Ready:
			state = "answering, not ready"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", d.Name, d.Address, state)
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// clusterFail turns an error of the cluster into the command's error, with
// the exit code the direct path gives for the same outcome.
func clusterFail(err error, table string) error {
	var de *client.DaemonError
	var pe *client.PositionsNotReachedError
	var ce *client.Error
	hint := "kmaterialize tables --cluster FILE shows which daemons hold which partitions"
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case errors.As(err, &pe):
		return &daemonError{msg: err.Error(), err: err, code: exitIncomplete,
			hint: "ask again, or with a longer --wait (at most 30s); kmaterialize tables --cluster FILE shows the daemons"}
	case client.IsCode(err, api.CodeRepartitioned):
		return &daemonError{msg: err.Error(), err: err, code: exitConflict,
			hint: fmt.Sprintf("the topic's partition count changed, so keys may not be where their hash says: drop table %q on every shard and rebuild it (docs/shards.md)", table)}
	case errors.As(err, &de):
		d := &daemon{cl: client.Dial(de.Addr)} // for the address in the message only: never dialled
		defer d.cl.Close()
		return d.fail(de.Err, table)
	case errors.Is(err, client.ErrUnserved):
		return &daemonError{msg: err.Error(), err: err, code: exitError, hint: hint}
	case errors.As(err, &ce) && (ce.Code == client.CodeTableNotFound || ce.Code == client.CodeTableNotReady || ce.Code == client.CodeKeyNotFound):
		return &daemonError{msg: ce.Message, err: err, code: exitNotFound, hint: hint}
	}
	return &daemonError{msg: err.Error(), err: err, code: exitError, hint: hint}
}
