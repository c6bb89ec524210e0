package ofconn

import (
	"context"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
)

// EachFlow dumps every flow of every table and calls fn for each as it
// arrives, without decoding it with libOpenflow (Desc is nil; Raw is
// structure-checked and Err says what is wrong). Raw aliases the reply and is
// valid only during the call, so a dump of a million flows holds one reply at
// a time, not the whole table. An error of fn ends the dump: the rest of the
// replies are read and dropped.
func (c *Conn) EachFlow(ctx context.Context, fn func(Flow) error) error {
	req := openflow15.NewFlowStatsRequest()
	req.TableId = openflow15.OFPTT_ALL // the default, table 0, would miss every other table
	var stop error
	err := c.multipart(ctx, openflow15.MultipartType_FlowDesc, req, minFlowDesc, func(raw []byte) error {
		if stop != nil {
			return nil
		}
		f := Flow{Raw: raw}
		if err := checkFlowEntry(raw); err != nil {
			f.Err = fmt.Errorf("ofconn: malformed flow (table %d, priority %d): %w", raw[4], be.Uint16(raw[6:8]), err)
		}
		stop = fn(f)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ofconn: dump flows: %w", err)
	}
	return stop
}
