package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/store"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:      "backup",
		Usage:     "write a consistent copy of the whole database, while the daemon serves it",
		UsageText: "kmaterialize backup --db FILE --out COPY [--socket PATH]",
		Description: `Writes a copy of the whole database file (every table, its kept
generations, checkpoints and history) as one read transaction saw it, to
COPY: into a temporary file beside it, fsynced, then renamed into place. On
any error COPY is untouched.

When the daemon holds --db, the copy is taken through it (GET /v1/backup):
the daemon writes it beside the database at disk speed, then sends it; the
copy received is checked against the SHA-256 the daemon sent. Otherwise the
file is read directly, with a shared lock.

While the copy is taken the daemon goes on serving and applying; a commit
that must grow the file past its memory mapping waits until the copy is
taken (kmaterialize_db_oldest_read_transaction_age_seconds shows it).

The copy is a database file like the original: check, export, get and
serve read it. To restore, stop whatever holds the database (the daemon),
copy the backup over the file (and remove FILE.holder if a killed process
left it), and start the daemon again: followed tables go on from the
copy's positions.

Exit codes: 0 written; 2 for --out naming --db, or no --out; 7 when
another backup or a compaction runs in the daemon, or the database is busy;
1 for anything else (no space: the daemon needs the file's size and 64 MiB
free beside it).

Examples:
  $ kmaterialize backup --db /var/lib/kmaterialize/tables.db --out /backup/tables-$(date +%F).db
  $ kmaterialize check --db /backup/tables-2026-12-04.db`,
		Flags: []cli.Flag{
			dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.StringFlag{Name: "out", Usage: "write the copy to `COPY` (atomically)", Required: true},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			out := c.String("out")
			if sameFile(c.String("db"), out) || filepath.Clean(c.String("db")) == filepath.Clean(out) {
				return &usageError{msg: fmt.Sprintf("--out %s is the database itself", out), hint: "--out /backup/tables.db: a file of its own"}
			}
			start := time.Now()
			var info store.BackupInfo
			var via string
			routed, err := viaDaemon(c, func(d *daemon) error {
				via = " through the daemon at " + d.cl.Addr()
				return store.WriteFileAtomic(out, func(w io.Writer) error {
					ci, err := d.cl.Backup(c.Context, w)
					info = store.BackupInfo{Bytes: ci.Bytes, SHA256: ci.SHA256, TxID: ci.TxID}
					return backupFail(d, err)
				})
			})
			if !routed {
				db, oerr := openRead(c)
				if oerr != nil {
					return oerr
				}
				defer db.Close()
				info, err = store.BackupFile(db, out)
			}
			if err != nil {
				return fmt.Errorf("backup of %s to %s: %w", c.String("db"), out, err)
			}
			fmt.Fprintf(stdoutOf(c), "wrote %s: %d bytes, sha256 %s, the database as of transaction %d%s, in %s\n",
				out, info.Bytes, info.SHA256, info.TxID, via, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
}

// backupFail maps the daemon's refusals of a backup to exit codes.
func backupFail(d *daemon, err error) error {
	var ce *client.Error
	if errors.As(err, &ce) && (ce.Code == client.CodeBackupRunning || ce.Code == client.CodeCompactRunning) {
		return &daemonError{msg: d.answered(ce.Message), err: err, code: exitBusy, hint: "try again once it is over"}
	}
	return d.fail(err, "")
}
