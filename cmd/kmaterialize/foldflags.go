package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
)

func foldFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "fold", Value: "latest", Usage: "how records become rows: latest (last value per key) or count (identity-deduplicated counts per group)"},
		&cli.StringFlag{Name: "identity-field", Usage: "count: JSON field that identifies a logical event (e.g. event_id)"},
		&cli.StringFlag{Name: "group-field", Usage: "count: JSON field whose value is the row counted (e.g. booth)"},
		&cli.StringSliceFlag{Name: "ignore-field", Usage: "count: top-level JSON field left out when comparing duplicates (repeatable), e.g. sent_at"},
		&cli.StringFlag{Name: "catalog", Usage: "count: JSON `FILE` with the groups that always appear: an array of names, or an object whose keys are the names"},
		&cli.BoolFlag{Name: "allow-unknown-groups", Usage: "count: accept groups that are not in the catalog"},
		&cli.StringFlag{Name: "on-bad-record", Value: "fail", Usage: "a record the fold cannot store (a key over 32 KiB; count: a value that is not a JSON object with the fields, a group outside the catalog): fail (exit 3, nothing published) or skip (leave it out and count it; kmaterialize tables shows the counts by reason)"},
	}, decodeFlags()...)
}

// countOnlyFlags apply to --fold count only.
var countOnlyFlags = []string{"identity-field", "group-field", "ignore-field", "catalog", "allow-unknown-groups"}

// specFlags maps a materialize.Spec field to the flag that sets it.
var specFlags = map[string]string{
	materialize.FieldTopic: "topic", materialize.FieldFold: "fold", materialize.FieldIdentityField: "identity-field",
	materialize.FieldGroupField: "group-field", materialize.FieldIgnoreFields: "ignore-field",
	materialize.FieldCatalog: "catalog", materialize.FieldAllowUnknownGroups: "allow-unknown-groups",
	materialize.FieldOnBadRecord: "on-bad-record", materialize.FieldEnd: "end", materialize.FieldStallTimeout: "stall-timeout",
	materialize.FieldValueFormat: "value-format", materialize.FieldKeyFormat: "key-format",
	materialize.FieldUntil: "to-offsets", materialize.FieldKeep: "keep", materialize.FieldMaxChange: "max-change",
	materialize.FieldReaders: "readers", materialize.FieldPartitions: "partitions", materialize.FieldPartitioner: "partitioner",
}

// tableSpec builds the table's definition from the rebuild flags. With
// --config and a --table the file defines, the file's definition is the
// base and only the flags given on the command line (or through their
// environment variables) replace its fields; a --fold other than the
// file's drops the file's fold fields with it.
func tableSpec(c *cli.Context) (materialize.Spec, error) {
	s, fromFile := configTable(c)
	flag := func(name string) bool { return !fromFile || c.IsSet(name) }
	s.Topic = c.String("topic")
	s.Name = c.String("table")
	if s.Name == "" {
		s.Name = s.Topic
	}
	if flag("on-bad-record") {
		onBad, err := fold.ParseOnBadRecord(c.String("on-bad-record"))
		if err != nil {
			return s, &usageError{msg: fmt.Sprintf("--on-bad-record %q: want fail or skip", c.String("on-bad-record")), hint: "--on-bad-record skip"}
		}
		s.OnBadRecord = onBad
	}
	if flag("fold") {
		if c.String("fold") != s.Fold {
			s.IdentityField, s.GroupField, s.IgnoreFields, s.Catalog, s.AllowUnknownGroups = "", "", nil, nil, false
		}
		s.Fold = c.String("fold")
	}
	switch s.Fold {
	case materialize.FoldLatest:
		for _, f := range countOnlyFlags {
			if c.IsSet(f) {
				return s, usageErrorf("--%s applies to --fold count only", f)
			}
		}
	case materialize.FoldCount:
		if flag("identity-field") {
			s.IdentityField = c.String("identity-field")
		}
		if flag("group-field") {
			s.GroupField = c.String("group-field")
		}
		if flag("ignore-field") {
			s.IgnoreFields = c.StringSlice("ignore-field")
		}
		if flag("allow-unknown-groups") {
			s.AllowUnknownGroups = c.Bool("allow-unknown-groups")
		}
		if s.IdentityField == "" || s.GroupField == "" {
			return s, &usageError{msg: "--fold count needs --identity-field and --group-field",
				hint: "--fold count --identity-field event_id --group-field booth --catalog booths.json"}
		}
		if path := c.String("catalog"); flag("catalog") && path != "" {
			data, err := os.ReadFile(path)
			if err != nil {
				return s, usageErrorf("--catalog: %v", err)
			}
			cat, err := fold.ParseCatalog(data)
			if err != nil {
				return s, usageErrorf("--catalog %s: %v", path, err)
			}
			s.Catalog = cat
		}
	default:
		return s, usageErrorf("--fold %q: want latest or count", s.Fold)
	}
	if _, err := s.NewFolder(); err != nil {
		return s, specUsage(err)
	}
	if flag("stall-timeout") {
		stall, err := stallTimeout(c)
		if err != nil {
			return s, err
		}
		s.StallTimeout = stall
	}
	if flag("end") {
		switch end := c.String("end"); end {
		case "high":
			s.End = replay.EndHigh
		case "stable":
			s.End = replay.EndStable
		default:
			return s, usageErrorf("--end %q: want high or stable", end)
		}
	}
	if flag("allow-empty") {
		s.AllowEmpty = c.Bool("allow-empty")
	}
	if hasFlag(c.Command, "readers") && flag("readers") {
		if n := c.Int("readers"); n < 1 || n > materialize.MaxReaders {
			return s, &usageError{msg: fmt.Sprintf("--readers %d: want 1 to %d", n, materialize.MaxReaders), hint: "--readers 4"}
		}
		s.Readers = c.Int("readers")
	}
	for _, f := range []struct {
		name string
		dst  *decode.Format
	}{{"value-format", &s.ValueFormat}, {"key-format", &s.KeyFormat}} {
		if !flag(f.name) || !hasFlag(c.Command, f.name) {
			continue
		}
		format, err := decode.ParseFormat(c.String(f.name))
		if err != nil {
			return s, &usageError{msg: fmt.Sprintf("--%s %q: want %s", f.name, c.String(f.name), decode.FormatNames),
				hint: "--" + f.name + " avro --schema-registry http://localhost:8081"}
		}
		*f.dst = format
	}
	if err := shardSpec(c, &s); err != nil {
		return s, err
	}
	if err := s.Validate(); err != nil {
		return s, specUsage(err)
	}
	return s, nil
}

// specUsage words a *materialize.SpecError with the flag's name, e.g.
// "--fold count: count fold: the group field "booth" cannot be ignored".
func specUsage(err error) error {
	var se *materialize.SpecError
	if !errors.As(err, &se) {
		return err
	}
	msg := "--" + specFlags[se.Field]
	if se.Value != "" {
		msg += " " + se.Value
	}
	return &usageError{msg: msg + ": " + se.Reason}
}
