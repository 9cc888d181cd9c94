package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/fold"
)

func foldFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "fold", Value: "latest", Usage: "how records become rows: latest (last value per key) or count (identity-deduplicated counts per group)"},
		&cli.StringFlag{Name: "identity-field", Usage: "count: JSON field that identifies a logical event (e.g. event_id)"},
		&cli.StringFlag{Name: "group-field", Usage: "count: JSON field whose value is the row counted (e.g. booth)"},
		&cli.StringSliceFlag{Name: "ignore-field", Usage: "count: top-level JSON field left out when comparing duplicates (repeatable), e.g. sent_at"},
		&cli.StringFlag{Name: "catalog", Usage: "count: JSON `FILE` with the groups that always appear: an array of names, or an object whose keys are the names"},
		&cli.BoolFlag{Name: "allow-unknown-groups", Usage: "count: accept groups that are not in the catalog"},
		&cli.StringFlag{Name: "on-bad-record", Value: "fail", Usage: "a record the fold cannot store (a key over 32 KiB; count: a value that is not a JSON object with the fields, a group outside the catalog): fail (exit 3, nothing published) or skip (leave it out and count it; kmaterialize tables shows the counts by reason)"},
	}
}

// newFolder builds the fold the flags ask for.
func newFolder(c *cli.Context, topic string) (fold.Folder, error) {
	countOnly := []string{"identity-field", "group-field", "ignore-field", "catalog", "allow-unknown-groups"}
	onBad, err := fold.ParseOnBadRecord(c.String("on-bad-record"))
	if err != nil {
		return nil, &usageError{msg: fmt.Sprintf("--on-bad-record %q: want fail or skip", c.String("on-bad-record")), hint: "--on-bad-record skip"}
	}
	switch name := c.String("fold"); name {
	case "latest":
		for _, f := range countOnly {
			if c.IsSet(f) {
				return nil, usageErrorf("--%s applies to --fold count only", f)
			}
		}
		return fold.NewLatestWith(fold.LatestConfig{Topic: topic, OnBadRecord: onBad}), nil
	case "count":
		cfg := fold.CountConfig{
			Topic:              topic,
			IdentityField:      c.String("identity-field"),
			GroupField:         c.String("group-field"),
			IgnoreFields:       c.StringSlice("ignore-field"),
			AllowUnknownGroups: c.Bool("allow-unknown-groups"),
			OnBadRecord:        onBad,
		}
		if cfg.IdentityField == "" || cfg.GroupField == "" {
			return nil, &usageError{msg: "--fold count needs --identity-field and --group-field",
				hint: "--fold count --identity-field event_id --group-field booth --catalog booths.json"}
		}
		if path := c.String("catalog"); path != "" {
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, usageErrorf("--catalog: %v", err)
			}
			cat, err := fold.ParseCatalog(data)
			if err != nil {
				return nil, usageErrorf("--catalog %s: %v", path, err)
			}
			cfg.Catalog = cat
		}
		f, err := fold.NewCount(cfg)
		if err != nil {
			return nil, usageErrorf("--fold count: %v", err)
		}
		return f, nil
	default:
		return nil, usageErrorf("--fold %q: want latest or count", name)
	}
}
