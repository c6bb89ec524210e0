package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// OpKind names one operation of a module writer.
type OpKind string

// The operations writers draw from.
const (
	OpPut       OpKind = "put"
	OpDelete    OpKind = "delete"
	OpSync      OpKind = "sync"
	OpStaged    OpKind = "sync-staged" // more entries than --stage-above
	OpMarkReady OpKind = "mark-ready"
	OpBackup    OpKind = "backup"
	// OpCrashing declares a flow whose learn() has 2,000 specs: vswitchd
	// 3.1 aborts on it, so it must be refused at declaration.
	OpCrashing OpKind = "put-crashing"
)

// identState is what the acknowledged writes say of one flow identity.
type identState struct {
	present bool
	actions string
	unknown bool // a write touched it with an unknown outcome
	// damaged: the harness flipped a byte of its record under flowstated
	// (store-flip-live), so the store leaves it out until it is declared
	// again: it must not be listed.
	damaged bool
	// relayed: acknowledged on a connection that may have been the
	// guard's relay (path.go), which records nothing: the store may lack
	// it until the controller's next reinstall through flowstated.
	relayed bool
	// epoch is the flowstated run in which the unknown write was made: a
	// later acknowledged write settles it only once that run is gone, since
	// until then the unknown write may still land after it.
	epoch int
}

// writer is one module writing random flows into its own table. Its model
// holds, per flow identity (the nw_dst: table and priority are the
// module's), the last acknowledged state.
type writer struct {
	module string
	table  int
	octet  int // the second octet of its addresses
	r      *rand.Rand
	c      *client.Client
	epoch  func() int // the current flowstated run
	// onErr sees every failed call (the disk-full check).
	onErr func(op string, err error)
	// proxy, when set, is the OpenFlow proxy's socket: the writer is a
	// controller behind it (proxied.go), conn its connection.
	proxy string
	conn  *ofconn.Conn
	// mayRelay tells whether a connection made now may be the guard's
	// relay; connRelayed is that verdict for conn, and relayDebt says a
	// write went over such a connection since the last reinstall through
	// flowstated (the controller reinstalls once it is back).
	mayRelay    func() bool
	connRelayed bool
	relayDebt   bool
	// acks holds the proxied controller's newest acknowledged change per
	// flow (barrier-delay, promises.go); onResync is told of each clear.
	acks     map[string]*ack
	onResync func()

	mu    sync.Mutex
	model map[string]identState
}

func newWriter(module string, table, octet int, seed uint64, c *client.Client, epoch func() int) *writer {
	return &writer{module: module, table: table, octet: octet, c: c, epoch: epoch,
		r: rand.New(rand.NewPCG(seed, uint64(octet))), model: map[string]identState{}}
}

func (w *writer) flow(ip, actions string) string {
	return fmt.Sprintf("table=%d,priority=10,tcp,nw_dst=%s,actions=%s", w.table, ip, actions)
}

// ip draws an identity: small syncs and puts share a pool of 40, a staged
// sync uses its own range beside it.
func (w *writer) ip(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", w.octet, i/250, i%250+1)
}

func (w *writer) actions() string {
	if w.r.IntN(2) == 0 {
		return "drop"
	}
	return "output:2"
}

// step runs one random operation; counts gets the kind.
func (w *writer) step(ctx context.Context, counts *counter) {
	if w.proxy != "" {
		w.proxyStep(ctx, counts)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p := w.r.Float64()
	switch {
	case p < 0.40:
		n := 1 + w.r.IntN(4)
		set := map[string]string{}
		for range n {
			set[w.ip(w.r.IntN(40))] = w.actions()
		}
		_, err := w.c.Put(ctx, client.Module{Bridge: Managed, Name: w.module}, w.entries(set)...)
		w.record(set, false, err)
		w.count(counts, OpPut, err)
	case p < 0.60:
		w.mu.Lock()
		var present []string
		for ip, st := range w.model {
			if st.present && !st.unknown {
				present = append(present, ip)
			}
		}
		w.mu.Unlock()
		sort.Strings(present)
		if len(present) == 0 {
			return
		}
		set := map[string]string{}
		for range 1 + w.r.IntN(3) {
			set[present[w.r.IntN(len(present))]] = ""
		}
		es := make([]client.Entry, 0, len(set))
		for _, ip := range sortedKeys(set) {
			es = append(es, client.FlowText(fmt.Sprintf("table=%d,priority=10,tcp,nw_dst=%s", w.table, ip)))
		}
		_, err := w.c.Delete(ctx, client.Module{Bridge: Managed, Name: w.module}, es...)
		w.record(set, false, err)
		w.count(counts, OpDelete, err)
	case p < 0.75:
		set := map[string]string{}
		for range 5 + w.r.IntN(10) {
			set[w.ip(w.r.IntN(40))] = w.actions()
		}
		_, err := w.c.Sync(ctx, client.Module{Bridge: Managed, Name: w.module}, w.r.IntN(2) == 0, w.entries(set)...)
		w.record(set, true, err)
		w.count(counts, OpSync, err)
	case p < 0.80:
		set := map[string]string{}
		for i := range 250 {
			set[w.ip(1000+i)] = "output:2"
		}
		for range 5 {
			set[w.ip(w.r.IntN(40))] = w.actions()
		}
		_, err := w.c.Sync(ctx, client.Module{Bridge: Managed, Name: w.module}, true, w.entries(set)...)
		w.record(set, true, err)
		w.count(counts, OpStaged, err)
	case p < 0.90:
		err := w.c.MarkReady(ctx, w.module)
		w.count(counts, OpMarkReady, err)
	case p < 0.98:
		_, err := w.c.Backup(ctx, io.Discard)
		w.count(counts, OpBackup, err)
	default:
		ip := fmt.Sprintf("10.%d.250.250", w.octet)
		specs := strings.TrimSuffix(strings.Repeat("NXM_OF_VLAN_TCI[0..11],", 2000), ",")
		f := fmt.Sprintf("table=%d,priority=10,tcp,nw_dst=%s,actions=learn(table=%d,priority=100,%s)", w.table, ip, w.table, specs)
		_, err := w.c.Put(ctx, client.Module{Bridge: Managed, Name: w.module}, client.FlowText(f))
		w.record(map[string]string{ip: "learn"}, false, err)
		w.count(counts, OpCrashing, err)
	}
}

// count counts one call of kind op and shows a failure to onErr.
func (w *writer) count(counts *counter, op OpKind, err error) {
	counts.add(string(op), err)
	if err != nil && w.onErr != nil {
		w.onErr(string(op), err)
	}
}

func (w *writer) entries(set map[string]string) []client.Entry {
	es := make([]client.Entry, 0, len(set))
	for _, ip := range sortedKeys(set) {
		es = append(es, client.FlowText(w.flow(ip, set[ip])))
	}
	return es
}

// record applies a write's outcome to the model. set maps identities to
// actions ("" deletes). replace is a Sync: every identity not in set is
// removed. An error of unknown outcome marks what the write touched as
// unknown; a refusal changes nothing.
func (w *writer) record(set map[string]string, replace bool, err error) {
	epoch := w.epoch()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if definite(err) || refusedByProxy(err) {
			return
		}
		for ip := range set {
			w.model[ip] = identState{unknown: true, epoch: epoch}
		}
		if replace {
			for ip, st := range w.model {
				st.unknown, st.epoch = true, epoch
				w.model[ip] = st
			}
		}
		return
	}
	settle := func(ip string, st identState) {
		if old := w.model[ip]; old.unknown && old.epoch == epoch {
			return
		}
		w.model[ip] = st
	}
	if replace {
		for ip := range w.model {
			if _, ok := set[ip]; !ok {
				settle(ip, identState{relayed: w.proxy != "" && w.connRelayed})
			}
		}
	}
	relayed := w.proxy != "" && w.connRelayed
	for ip, a := range set {
		settle(ip, identState{present: a != "", actions: a, relayed: relayed})
	}
}

// victim returns the i-th (modulo) flow whose last acknowledged write left
// it present, for a fault to damage.
func (w *writer) victim(i int) (ip, actions string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ips []string
	for _, ip := range sortedKeys(w.model) {
		if st := w.model[ip]; st.present && !st.unknown && !st.damaged {
			ips = append(ips, ip)
		}
	}
	if len(ips) == 0 {
		return "", "", false
	}
	ip = ips[i%len(ips)]
	return ip, w.model[ip].actions, true
}

// markDamaged notes that ip's record was damaged: until an acknowledged
// write of it, the store must leave it out.
func (w *writer) markDamaged(ip string) {
	w.mu.Lock()
	w.model[ip] = identState{damaged: true}
	w.mu.Unlock()
}

// definite reports an error after which nothing of the request was stored.
func definite(err error) bool {
	for _, k := range []error{errdefs.ErrInvalidArgument, errdefs.ErrFailedPrecondition, errdefs.ErrPermissionDenied,
		errdefs.ErrResourceExhausted, errdefs.ErrAlreadyExists, errdefs.ErrNotFound} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// check compares the model with what the store lists for the module and
// returns one line per lost or resurrected acknowledged write.
func (w *writer) check(ctx context.Context) ([]string, int, error) {
	stored, err := w.c.List(ctx, client.Filter{Bridge: Managed, Module: w.module})
	if err != nil {
		return nil, 0, err
	}
	have := map[string]string{}
	for _, se := range stored {
		ip, actions := fieldOf(se.Text, "nw_dst="), actionsOf(se.Text)
		have[ip] = actions
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var bad []string
	checked := 0
	for _, ip := range sortedKeys(w.model) {
		st := w.model[ip]
		if st.unknown || st.relayed {
			continue
		}
		checked++
		got, ok := have[ip]
		switch {
		case st.present && !ok:
			bad = append(bad, fmt.Sprintf("module %s: acknowledged flow nw_dst=%s (actions=%s) is not stored", w.module, ip, st.actions))
		case st.present && got != st.actions:
			bad = append(bad, fmt.Sprintf("module %s: flow nw_dst=%s stored with actions=%s, acknowledged actions=%s", w.module, ip, got, st.actions))
		case st.damaged && ok:
			bad = append(bad, fmt.Sprintf("module %s: flow nw_dst=%s listed (actions=%s) though its record was damaged and not declared since", w.module, ip, got))
		case !st.present && ok:
			bad = append(bad, fmt.Sprintf("module %s: flow nw_dst=%s stored (actions=%s) after its acknowledged removal", w.module, ip, got))
		}
	}
	return bad, checked, nil
}

// fieldOf returns the value of key (as "nw_dst=") in an ovs-ofctl line.
func fieldOf(text, key string) string {
	i := strings.Index(text, key)
	if i < 0 {
		return ""
	}
	v := text[i+len(key):]
	if j := strings.IndexAny(v, ", "); j >= 0 {
		v = v[:j]
	}
	return v
}

func actionsOf(text string) string {
	i := strings.Index(text, "actions=")
	if i < 0 {
		return ""
	}
	return strings.TrimSpace(text[i+len("actions="):])
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// counter counts events by kind, and failures by kind.
type counter struct {
	mu     sync.Mutex
	ok     map[string]int
	failed map[string]int
}

func newCounter() *counter { return &counter{ok: map[string]int{}, failed: map[string]int{}} }

func (c *counter) add(kind string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failed[kind]++
	} else {
		c.ok[kind]++
	}
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := map[string]bool{}
	for k := range c.ok {
		keys[k] = true
	}
	for k := range c.failed {
		keys[k] = true
	}
	var b strings.Builder
	for _, k := range sortedKeys(keys) {
		fmt.Fprintf(&b, "  %-34s %5d ok %5d failed\n", k, c.ok[k], c.failed[k])
	}
	return b.String()
}

// Total is the number of events counted, failed or not.
func (c *counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.ok {
		n += v
	}
	for _, v := range c.failed {
		n += v
	}
	return n
}
