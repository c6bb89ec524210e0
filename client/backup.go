package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
)

// Backup writes a consistent snapshot of flowstated's store to w (a bbolt
// file, taken in one read transaction while flowstated serves) and returns
// its size. w receives the file in order; on error what it got is partial.
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
	stream, err := c.api.Backup(ctx, &flowstatev1.BackupRequest{})
	if err != nil {
		return 0, fromGRPC(err)
	}
	var n int64
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fromGRPC(err)
		}
		m, err := w.Write(resp.GetData())
		n += int64(m)
		if err != nil {
			return n, fmt.Errorf("client: backup: %w", err)
		}
	}
}
