package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
)

func newBackup(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a consistent snapshot of flowstated's store to FILE, while it serves",
		Long: `Write a consistent snapshot of flowstated's store to FILE, while it serves.

The snapshot is taken in one read transaction of the store: the desired state
as of that moment. flowstated copies it to a spool beside the store first and
streams it from there, so a slow or stalled flowctl holds no transaction. It is
written to FILE.tmp, synced, and renamed to FILE, so FILE is either the previous
file or the complete snapshot. To restore it, stop flowstated, copy FILE to its
--db, and start it (docs/operations.md). With --module-writer rules, only root
and the uids and gids those rules name may take a backup: it holds every
module's entries.`,
		Example: `  flowctl backup /var/backups/flowstate-$(date +%F).db`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				n, err := backupTo(ctx, c, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d bytes\n", args[0], n)
				return nil
			})
		},
	}
}

// backupTo writes the snapshot to path.tmp, syncs it, renames it to path and
// syncs the directory, so a crash leaves path whole or as it was.
func backupTo(ctx context.Context, c *client.Client, path string) (n int64, err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if n, err = c.Backup(ctx, f); err != nil {
		return n, err
	}
	if err = f.Sync(); err != nil {
		return n, err
	}
	if err = f.Close(); err != nil {
		return n, err
	}
	if err = os.Rename(tmp, path); err != nil {
		return n, err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return n, err
	}
	defer d.Close()
	return n, d.Sync()
}
