package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
)

// A controller declares its complete set of flows at start-up and marks itself
// ready, then adds and removes flows as pods come and go.
func Example() {
	c, err := client.New(client.DefaultTarget)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err = c.Sync(ctx, "br-int", "pod", true,
		client.FlowText("table=0,priority=100,in_port=10,actions=set_field:0x3/0xf->reg0,goto_table:1"),
		client.FlowText("table=1,priority=100,ip,nw_dst=10.10.0.26,actions=output:10"),
	)
	var ee *errdefs.EntryError
	switch {
	case errors.As(err, &ee):
		log.Fatalf("entry %d refused: %v", ee.Index, err)
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		log.Fatalf("conflict with another module: %v", err)
	case err != nil:
		log.Fatal(err)
	}

	applied, err := c.Put(ctx, "br-int", "pod", client.FlowText("table=1,priority=100,ip,nw_dst=10.10.0.27,actions=output:11"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("on the switch already:", applied)
}
