package chaos

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// An OpenFlow 1.3 controller behind the proxy (issue 31, fault 4): the
// proxy relays it without recording, and flowstated must leave its
// permanent flows alone (server/ofproxy/unrecorded.go,
// server/restore/kept.go), across its own restarts too (the kept set is
// stored: server/restore/keptsave.go). It writes table of13Table; the kept
// check (keptOnce) dumps it: every flow whose add the controller's barrier
// acknowledged is there while the vswitchd it went to runs, br-int was not
// rebuilt, and the controller has not deleted it.

// of13Table is the OpenFlow 1.3 controller's table on br-int.
const of13Table = 40

// kflow is one flow the OpenFlow 1.3 controller installed: its actions,
// when its barrier was answered, the vswitchd and br-int it went to, and
// whether its connection may have been the guard's relay (which tells
// flowstated nothing, so flowstated deletes it once back: the controller
// reinstalls). busy: a change of it is in flight; reported: a violation
// was reported for this install.
type kflow struct {
	actions  string
	at       time.Time
	pid, gen int
	relayed  bool
	full     bool // the store's disk was full: its kept record may be lost
	epoch    int  // the flowstated run it was acknowledged under
	busy     bool
	reported bool
}

// of13Ctl is the OpenFlow 1.3 controller.
type of13Ctl struct {
	path     string
	r        *rand.Rand
	mayRelay func() bool
	vswitchd func() (pid, gen int) // the running vswitchd and br-int's generation
	state    func() (epoch int, full bool)

	nc      net.Conn
	br      *bufio.Reader
	xid     uint32
	relayed bool // nc may be the guard's relay
	pid     int  // the vswitchd nc was made under
	debt    bool // flows went over a relay since the last reinstall through flowstated

	mu    sync.Mutex
	want  map[string]string // the controller's desired flows, by nw_dst
	flows map[string]*kflow // installed and acknowledged
}

func newOF13Ctl(path string, seed uint64, mayRelay func() bool, vswitchd func() (int, int), state func() (int, bool)) *of13Ctl {
	return &of13Ctl{path: path, r: rand.New(rand.NewPCG(seed, 13)), mayRelay: mayRelay, vswitchd: vswitchd, state: state,
		want: map[string]string{}, flows: map[string]*kflow{}}
}

// of13Loop runs the controller until ctx ends.
func (r *run) of13Loop(ctx context.Context, c *of13Ctl) {
	defer c.close()
	for ctx.Err() == nil {
		r.gate.RLock()
		err := c.step(ctx)
		r.gate.RUnlock()
		r.rep.Ops.add("of13-step", err)
		if err != nil {
			r.log.Debug("the OpenFlow 1.3 controller's step failed", "err", err)
		}
		if !sleepCtx(ctx, time.Duration(200+c.r.IntN(400))*time.Millisecond) {
			return
		}
	}
}

// step connects if it must (reinstalling everything it wants on a new
// vswitchd, or after writes over a relay), then adds a few flows or deletes
// one, and waits for the barrier reply.
func (c *of13Ctl) step(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if c.nc == nil {
		if err := c.dial(ctx); err != nil {
			return err
		}
		pid, _ := c.vswitchd()
		c.mu.Lock()
		stale := c.debt && !c.relayed
		for _, f := range c.flows {
			stale = stale || f.pid != pid
		}
		all := map[string]string{}
		for ip, a := range c.want {
			all[ip] = a
		}
		c.mu.Unlock()
		if stale && len(all) > 0 {
			if err := c.send(ctx, all); err != nil {
				return err
			}
			if !c.relayed {
				c.debt = false
			}
			return nil
		}
	}
	set := map[string]string{}
	if c.r.IntN(4) == 0 {
		c.mu.Lock()
		ips := sortedKeys(c.want)
		c.mu.Unlock()
		if len(ips) == 0 {
			return nil
		}
		set[ips[c.r.IntN(len(ips))]] = ""
	} else {
		for range 1 + c.r.IntN(3) {
			a := "drop"
			if c.r.IntN(2) == 0 {
				a = "output:2"
			}
			set[fmt.Sprintf("10.4.0.%d", 1+c.r.IntN(20))] = a
		}
	}
	return c.send(ctx, set)
}

// send writes set (actions, or "" for a strict delete) and a barrier, and
// records what the barrier acknowledged. A failure closes the connection
// and leaves what it touched unchecked (its outcome is unknown) but wanted.
func (c *of13Ctl) send(ctx context.Context, set map[string]string) error {
	pid, gen := c.vswitchd()
	c.mu.Lock()
	for ip, a := range set {
		if a == "" {
			delete(c.want, ip)
			delete(c.flows, ip)
			continue
		}
		c.want[ip] = a
		if f := c.flows[ip]; f != nil {
			f.busy = true
		}
	}
	c.mu.Unlock()
	if c.relayed {
		c.debt = true
	}
	_, full := c.state()
	err := c.write(ctx, set)
	now := time.Now()
	epoch, full2 := c.state()
	pid2, gen2 := c.vswitchd()
	c.mu.Lock()
	defer c.mu.Unlock()
	for ip, a := range set {
		if a == "" {
			continue
		}
		if err != nil || pid != pid2 || gen != gen2 || pid != c.pid {
			delete(c.flows, ip)
			continue
		}
		c.flows[ip] = &kflow{actions: a, at: now, pid: pid, gen: gen, relayed: c.relayed, full: full || full2, epoch: epoch}
	}
	if err != nil {
		c.close()
	}
	return err
}

// dial connects to the proxy socket and negotiates OpenFlow 1.3.
func (c *of13Ctl) dial(ctx context.Context) error {
	before := c.mayRelay()
	pid, _ := c.vswitchd()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		return fmt.Errorf("chaos: of13: dial: %w", err)
	}
	c.nc, c.br, c.pid = nc, bufio.NewReader(nc), pid
	if err := c.writeMsg(header(of13Hello, 8, c.nextXid())); err != nil {
		c.close()
		return err
	}
	m, err := c.read(ctx)
	if err != nil {
		c.close()
		return err
	}
	if m[1] != of13Hello {
		c.close()
		return fmt.Errorf("chaos: of13: want a HELLO, got type %d", m[1])
	}
	if err := c.barrier(ctx); err != nil {
		c.close()
		return err
	}
	c.relayed = before || c.mayRelay()
	return nil
}

// write sends set's flow mods and a barrier and waits for its reply.
func (c *of13Ctl) write(ctx context.Context, set map[string]string) error {
	for _, ip := range sortedKeys(set) {
		if err := c.writeMsg(flowMod13(ip, set[ip], c.nextXid())); err != nil {
			return err
		}
	}
	return c.barrier(ctx)
}

// barrier sends a BARRIER_REQUEST and reads until its reply, answering
// echo requests; an OFPT_ERROR before it fails the write.
func (c *of13Ctl) barrier(ctx context.Context) error {
	xid := c.nextXid()
	if err := c.writeMsg(header(of13BarrierRequest, 8, xid)); err != nil {
		return err
	}
	for {
		m, err := c.read(ctx)
		if err != nil {
			return err
		}
		switch m[1] {
		case of13Error:
			return fmt.Errorf("chaos: of13: the switch refused a message: % x", m[:min(len(m), 16)])
		case of13BarrierReply:
			if binary.BigEndian.Uint32(m[4:8]) == xid {
				return nil
			}
		}
	}
}

// read reads one message, answering echo requests on the way.
func (c *of13Ctl) read(ctx context.Context) ([]byte, error) {
	dl, _ := ctx.Deadline()
	_ = c.nc.SetReadDeadline(dl)
	for {
		m, err := ofconn.ReadMessage(c.br)
		if err != nil {
			return nil, fmt.Errorf("chaos: of13: read: %w", err)
		}
		if len(m) < 8 {
			return nil, errors.New("chaos: of13: short message")
		}
		if m[1] == of13EchoRequest {
			r := append([]byte(nil), m...)
			r[1] = of13EchoReply
			if err := c.writeMsg(r); err != nil {
				return nil, err
			}
			continue
		}
		return m, nil
	}
}

func (c *of13Ctl) writeMsg(b []byte) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("chaos: of13: write: %w", err)
	}
	return nil
}

func (c *of13Ctl) nextXid() uint32 { c.xid++; return c.xid }

func (c *of13Ctl) close() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc = nil
	}
}

// OpenFlow 1.3's version and the message types the controller uses.
const (
	of13Version        = 4
	of13Hello          = 0
	of13Error          = 1
	of13EchoRequest    = 2
	of13EchoReply      = 3
	of13FlowMod        = 14
	of13BarrierRequest = 20
	of13BarrierReply   = 21
)

// flowMod13 encodes an OpenFlow 1.3 FLOW_MOD of of13Table, priority 10,
// tcp to ip: an add with actions ("drop": no instruction, "output:2"), or
// a strict delete for "". Written out by hand: OpenFlow 1.3 as the wire
// has it, not as a library re-encodes it.
func flowMod13(ip, actions string, xid uint32) []byte {
	b := make([]byte, 48, 96)
	b[25] = 0 // OFPFC_ADD
	if actions == "" {
		b[25] = 4 // OFPFC_DELETE_STRICT
	}
	b[24] = of13Table
	binary.BigEndian.PutUint16(b[30:], 10)         // priority
	binary.BigEndian.PutUint32(b[32:], 0xffffffff) // buffer_id: none
	binary.BigEndian.PutUint32(b[36:], 0xffffffff) // out_port: any
	binary.BigEndian.PutUint32(b[40:], 0xffffffff) // out_group: any
	// ofp_match, OXM: eth_type=0x0800, ip_proto=6, ipv4_dst=ip; 23 bytes
	// padded to 24.
	m := []byte{0, 1, 0, 23, 0x80, 0, 0x0a, 2, 0x08, 0x00, 0x80, 0, 0x14, 1, 6, 0x80, 0, 0x18, 4}
	m = append(m, net.ParseIP(ip).To4()...)
	b = append(b, append(m, 0)...)
	if actions == "output:2" {
		// OFPIT_APPLY_ACTIONS with one OFPAT_OUTPUT to port 2.
		b = append(b, 0, 4, 0, 24, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 2, 0xff, 0xff, 0, 0, 0, 0, 0, 0)
	}
	copy(b, header(of13FlowMod, uint16(len(b)), xid))
	return b
}

// header is an OpenFlow 1.3 header of type t, length n.
func header(t uint8, n uint16, xid uint32) []byte {
	b := make([]byte, 8)
	b[0], b[1] = of13Version, t
	binary.BigEndian.PutUint16(b[2:], n)
	binary.BigEndian.PutUint32(b[4:], xid)
	return b
}

// keptLoop checks the kept invariant twice a second.
func (r *run) keptLoop(ctx context.Context, c *of13Ctl) {
	for sleepCtx(ctx, 500*time.Millisecond) {
		r.keptOnce(ctx, c)
	}
}

// keptOnce dumps of13Table and checks that every flow the controller's
// barrier acknowledged before the dump is there with its actions, while
// the vswitchd and br-int it went to are the ones running. A flow that
// went over the guard's relay is checked only while flowstated stays dead
// since before its install: once flowstated is back it may delete it (it
// was never told), and the controller reinstalls.
func (r *run) keptOnce(ctx context.Context, c *of13Ctl) {
	r.mu.Lock()
	skip := r.vsDown || r.vsFrozen || r.running[ManagedRecreate]
	gen := r.brGen
	epoch := r.epoch
	r.mu.Unlock()
	pid := r.n.sb.VswitchdPID()
	if skip || pid == 0 {
		return
	}
	start := time.Now()
	dead := r.n.deadSince()
	c.mu.Lock()
	snap := map[string]kflow{}
	for ip, f := range c.flows {
		// On a full disk the kept record may not be stored: a
		// flowstated started since may rightly have deleted the flow
		// (server/restore/keptsave.go).
		if f.full && f.epoch != epoch {
			continue
		}
		if f.busy || f.reported || f.pid != pid || f.gen != gen || (f.relayed && (dead.IsZero() || dead.After(f.at))) {
			continue
		}
		snap[ip] = *f
	}
	c.mu.Unlock()
	if len(snap) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out, err := r.n.sb.Ofctl(ctx, "--no-stats", "--no-names", "dump-flows", Managed, fmt.Sprintf("table=%d", of13Table))
	r.mu.Lock()
	gen2 := r.brGen
	r.mu.Unlock()
	if err != nil || r.n.sb.VswitchdPID() != pid || gen2 != gen {
		return // unobservable now: a later look judges
	}
	have := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if ip := fieldOf(l, "nw_dst="); ip != "" {
			have[ip] = actionsOf(l)
		}
	}
	var gone []string
	c.mu.Lock()
	for _, ip := range sortedKeys(snap) {
		f := c.flows[ip]
		if f == nil || !f.at.Equal(snap[ip].at) || f.busy || !f.at.Before(start) {
			continue // changed or deleted meanwhile
		}
		if got, ok := have[ip]; ok && got == f.actions {
			r.rep.Checks.add(InvKept, nil)
			continue
		}
		f.reported = true
		gone = append(gone, fmt.Sprintf("nw_dst=%s actions=%s (acknowledged %v ago, now %q)", ip, f.actions,
			time.Since(f.at).Round(time.Millisecond), have[ip]))
	}
	c.mu.Unlock()
	if len(gone) > 0 {
		r.rep.Checks.add(InvKept, errors.New("violated"))
		r.violate(InvKept, "%d flows the OpenFlow 1.3 controller installed through the proxy are gone from br-int table %d though vswitchd (pid %d) and br-int are the ones they went to: %s",
			len(gone), of13Table, pid, strings.Join(gone, "; "))
	}
}
