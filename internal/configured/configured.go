// Package configured gives serve the work of a config file's tables: each
// table's rebuild (the same as kmaterialize rebuild --config FILE --table
// NAME), its follow mode, and the update, all with the file's brokers,
// properties and Schema Registry, their errors scrubbed of its secrets.
package configured

import (
	"context"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/serve"
	"github.com/kmaterialize/kmaterialize/store"
)

// Tables turns each table of cfg into a serve.Table whose Build is
// the same rebuild as kmaterialize rebuild --config FILE --table NAME. A
// build's error is what the API shows (runs, table status): none of the
// config's secrets may be in it. The rebuilds and followers take turns on
// cpu (cpushare.ForDaemon, one share for the whole daemon, reloads
// included) so that the daemon's reads go first; nil: unlimited.
func Tables(cfg *config.Config, cpu *cpushare.Share) []serve.Table {
	red := config.NewRedactor()
	red.Add(cfg.Secrets()...)
	brokers, props := cfg.Kafka.Brokers, map[string]string(cfg.Kafka.Properties)
	registry := cfg.SchemaRegistry.Registry().WithEnv(os.LookupEnv)
	out := make([]serve.Table, 0, len(cfg.Tables))
	for _, t := range cfg.Tables {
		spec := t.Spec
		rebuild := func(ctx context.Context, db *store.DB, log zerolog.Logger, catchUp func(context.Context) (map[int32]int64, error)) (materialize.Report, error) {
			opts, err := spec.Options(db, brokers, props, log)
			if err != nil {
				return materialize.Report{}, err
			}
			opts.CatchUp = catchUp
			opts.Decode.Registry = registry
			opts.CPU = cpu
			rep, err := materialize.Rebuild(ctx, opts)
			if err != nil {
				err = fmt.Errorf("rebuild of table %q from topic %q failed, nothing published: %w", spec.Name, spec.Topic, err)
			}
			return rep, red.Error(config.Scrub(err, props))
		}
		st := serve.Table{
			Name: spec.Name, Topic: spec.Topic, Fold: spec.Fold, Schedule: t.Schedule, Spec: &spec,
			Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
				return rebuild(ctx, db, log, nil)
			},
		}
		if t.Follow {
			st.Follow = follow(spec, t, brokers, props, registry, red, cpu, rebuild)
		}
		out = append(out, st)
	}
	return out
}

// Update is the daemon's update: kmaterialize update --db FILE
// --table NAME with the config's brokers and properties (those of the
// config loaded at start), taking turns on cpu as Tables' rebuilds do.
func Update(cfg *config.Config, cpu *cpushare.Share) serve.UpdateFunc {
	brokers, props := cfg.Kafka.Brokers, map[string]string(cfg.Kafka.Properties)
	registry := cfg.SchemaRegistry.Registry().WithEnv(os.LookupEnv)
	red := config.NewRedactor()
	red.Add(cfg.Secrets()...)
	return func(ctx context.Context, db *store.DB, table string, rebuildIfNeeded bool, log zerolog.Logger) (materialize.Report, error) {
		// A configured table's update is bounded by its memory (the
		// daemon's memory counts it among the runs).
		var memory int64
		if spec, err := cfg.Table(table); err == nil {
			memory = spec.Memory
		}
		rep, err := materialize.Update(ctx, materialize.UpdateOptions{DB: db, Table: table, Brokers: brokers, Props: props,
			Registry: registry, RebuildIfNeeded: rebuildIfNeeded, Memory: memory, CPU: cpu, Log: log})
		if err != nil {
			err = fmt.Errorf("update of table %q failed, nothing published: %w", table, err)
		}
		return rep, red.Error(config.Scrub(err, props))
	}
}

// follow is the daemon's follow mode for table t (follow: true):
// materialize.KeepCurrent with the config's connection, and the table's
// rebuild with its catch-up.
func follow(spec materialize.Spec, t config.Table, brokers string, props map[string]string, registry decode.Registry, red *config.Redactor, cpu *cpushare.Share,
	rebuild func(context.Context, *store.DB, zerolog.Logger, func(context.Context) (map[int32]int64, error)) (materialize.Report, error)) *serve.FollowSettings {
	return &serve.FollowSettings{
		Run: func(ctx context.Context, db *store.DB, log zerolog.Logger, status *materialize.FollowStatus) error {
			err := materialize.KeepCurrent(ctx, materialize.FollowOptions{
				DB: db, Spec: spec, Interval: t.FollowInterval, Status: status, Registry: registry, CPU: cpu, Log: log,
				Replay: replay.Config{Brokers: brokers, Props: props, StallTimeout: spec.StallTimeout, Log: log},
			})
			return red.Error(config.Scrub(err, props))
		},
		Live: func(ctx context.Context, db *store.DB, log zerolog.Logger, status *materialize.FollowStatus) error {
			err := materialize.WatchLive(ctx, materialize.FollowOptions{
				DB: db, Spec: spec, Status: status, Log: log,
				Replay: replay.Config{Brokers: brokers, Props: props, StallTimeout: spec.StallTimeout, Log: log},
			})
			return red.Error(config.Scrub(err, props))
		},
		Rebuild:         rebuild,
		MaxLag:          t.MaxLag,
		RebuildIfNeeded: t.RebuildIfNeeded,
		Retriable:       materialize.FollowRetriable,
	}
}
