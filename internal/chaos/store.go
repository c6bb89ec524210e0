package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
)

// Faults of the store: its file system filled, and a byte flipped in it.

// diskFull fills the store's tmpfs with a ballast file for hold (and a
// little more, so the writers meet it), then frees it. Writes meanwhile must
// be acknowledged and stored, or refused saying the disk is full (checked by
// checkWriteErr); the hold, acked and converged invariants go on as usual.
func (r *run) diskFull(ctx context.Context, hold time.Duration) error {
	n := r.n
	if !n.tmpfs {
		return errors.New("chaos: disk-full needs the store on its own tmpfs (run as root)")
	}
	path := filepath.Join(n.state, "ballast")
	r.setFull(true)
	defer r.setFull(false)
	err := fill(path)
	if err == nil {
		sleepCtx(ctx, hold+2*time.Second)
	}
	if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = errors.Join(err, rmErr)
	}
	return err
}

// fill writes path until its file system is full.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chaos: ballast: %w", err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for size := len(chunk); size >= 4096; {
		if _, err := f.Write(chunk[:size]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return fmt.Errorf("chaos: ballast: %w", err)
			}
			size /= 2
		}
	}
	return nil
}

func (r *run) setFull(on bool) {
	r.mu.Lock()
	r.full = on
	r.mu.Unlock()
}

// checkWriteErr holds a failed call to the promise for a full disk: an
// error caused by the disk being full says so, and is RESOURCE_EXHAUSTED
// or UNAVAILABLE (nothing of the write stayed), never UNKNOWN or INTERNAL,
// which leave the caller to guess whether it was stored.
func (r *run) checkWriteErr(op string, err error) {
	if err == nil {
		return
	}
	r.mu.Lock()
	full := r.full
	r.mu.Unlock()
	text := err.Error()
	space := strings.Contains(text, "no space left") || strings.Contains(text, "disk is full")
	if !space {
		return
	}
	ok := (errors.Is(err, errdefs.ErrResourceExhausted) || errors.Is(err, errdefs.ErrUnavailable)) && strings.Contains(text, "disk is full")
	r.rep.Checks.add(InvDiskFull, errIf(!ok))
	if !ok {
		r.violate(InvDiskFull, "%s on a full disk (ballast in place: %v) failed without saying so as RESOURCE_EXHAUSTED or UNAVAILABLE: %v", op, full, err)
	}
}

// storeFlip kills flowstated, flips one byte of one record of br-int's flow
// bucket in the stopped store, and starts flowstated on it: the start must
// be refused (exit 1) naming the damage, since a record whose checksum does
// not match must never reach the switch. The node stays without flowstated
// for hold (the guard releases a vswitchd that waits); then the harness
// puts the byte back, as an operator restores the backup taken at the stop,
// and starts flowstated again. Nothing acknowledged is lost that way, so
// acked stays exact for every entry, the damaged one included.
func (r *run) storeFlip(ctx context.Context, st Step) error {
	n := r.n
	r.excuse()
	r.flowstatedStops()
	if err := n.signalFlowstated(syscall.SIGKILL); err != nil {
		return err
	}
	seed := uint64(st.Pause.Milliseconds())<<32 | uint64(st.Hold.Milliseconds())
	d, err := flipRecord(n.dbPath(), rand.New(rand.NewPCG(seed, r.cfg.Seed)))
	if err != nil {
		_ = r.startFlowstated(ctx)
		return err
	}
	r.log.Info("store byte flipped", "record", d)
	code, out, err := n.tryStart(ctx, 20*time.Second)
	refused := err == nil && code == 1 && strings.Contains(out, "is corrupt") && strings.Contains(out, "flowstated will not start on it") &&
		(d.inKey || strings.Contains(out, "bridges/"+Managed+"/flow key "+d.keyHex()))
	r.rep.Checks.add(InvDamage, errIf(!refused))
	if !refused {
		r.violate(InvDamage, "flowstated on a store with %s: exit %d, err %v, want exit 1 naming the damage; it said: %s",
			d, code, err, lastLines(out, 5))
	}
	sleepCtx(ctx, st.Hold)
	if err := d.undo(n.dbPath()); err != nil {
		return err
	}
	err = r.startFlowstated(ctx)
	r.excuse()
	return err
}

// flipped is a byte flipped in one record.
type flipped struct {
	key, value []byte // as they were
	module     string
	at         int  // offset in key|value
	mask       byte // what the byte was XORed with
	inKey      bool
	offsets    []int64 // where in the file
}

func (d flipped) String() string {
	part := "value"
	if d.inKey {
		part = "key"
	}
	return fmt.Sprintf("a byte of the %s of record %x (module %s, offset %d ^%#x) flipped", part, d.key, d.module, d.at, d.mask)
}

// keyHex is the record's key as the store's messages print it: hex, at most
// its first 64 bytes.
func (d flipped) keyHex() string {
	return fmt.Sprintf("%x", d.key[:min(len(d.key), 64)])
}

// flipRecord flips one byte of one record of br-int's flow bucket in the
// store at path, which nothing holds open. rng chooses the record and the
// byte. bbolt writes a leaf element's key and value side by side, so the
// record is found in the file by its bytes; a copy in a page freed since is
// flipped too, which changes nothing.
func flipRecord(path string, rng *rand.Rand) (flipped, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return flipped{}, fmt.Errorf("chaos: open the stopped store: %w", err)
	}
	var recs []flipped
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("bridges"))
		for _, name := range []string{Managed, "flow"} {
			if b == nil {
				break
			}
			b = b.Bucket([]byte(name))
		}
		if b == nil {
			return errors.New("no bucket bridges/" + Managed + "/flow")
		}
		return b.ForEach(func(k, v []byte) error {
			if v != nil && len(v) > 2 && len(v) >= 2+int(v[1]) {
				recs = append(recs, flipped{key: bytes.Clone(k), value: bytes.Clone(v), module: string(v[2 : 2+int(v[1])])})
			}
			return nil
		})
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return flipped{}, fmt.Errorf("chaos: read the stopped store: %w", err)
	}
	if len(recs) == 0 {
		return flipped{}, errors.New("chaos: the store holds no flow record of " + Managed)
	}
	d := recs[rng.IntN(len(recs))]
	kv := append(bytes.Clone(d.key), d.value...)
	d.at, d.mask = rng.IntN(len(kv)), byte(1+rng.IntN(255))
	d.inKey = d.at < len(d.key)
	key, value := d.key, d.value
	d.value = kv
	if err := d.find(path); err != nil {
		return flipped{}, err
	}
	d.key, d.value = key, value
	return d, d.xor(path)
}

// undo puts the flipped bytes back.
func (d flipped) undo(path string) error { return d.xor(path) }

func (d flipped) xor(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [1]byte
	for _, off := range d.offsets {
		if _, err := f.ReadAt(b[:], off); err != nil {
			return err
		}
		b[0] ^= d.mask
		if _, err := f.WriteAt(b[:], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// lastLines is the last n lines of s, for a message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// storeFlipLive flips one byte of one acknowledged record under a running
// flowstated, as a disk that returns other bytes than it took: the read that
// meets it must leave it out and quarantine it, named by bucket with a
// checksum mismatch, and the next replay takes its flow off the switch.
// The harness knows the damaged identity (it chose it), so acked expects it
// absent, not lost; the module then declares it again, as a controller does
// on the quarantine event, which must lift the quarantine. Writers pause
// meanwhile so that no write replaces the record before a read meets it,
// and flowstated is frozen for the flip so that no page is half written.
func (r *run) storeFlipLive(ctx context.Context, st Step, writers []*writer) error {
	n := r.n
	if !n.alive() {
		return errors.New("chaos: flowstated does not run")
	}
	r.gate.Lock()
	defer r.gate.Unlock()
	w := writers[int(st.Hold.Milliseconds())%len(writers)]
	ip, actions, ok := w.victim(int(st.Pause.Milliseconds()))
	if !ok {
		return errors.New("chaos: no acknowledged flow to damage")
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stored, err := n.c.List(cctx, client.Filter{Bridge: Managed, Module: w.module})
	if err != nil {
		return err
	}
	var payload []byte
	for _, se := range stored {
		if fieldOf(se.Text, "nw_dst=") == ip {
			payload = se.OpenFlow
		}
	}
	if payload == nil {
		return fmt.Errorf("chaos: acknowledged flow nw_dst=%s of %s not listed", ip, w.module)
	}
	needle := append([]byte{2, byte(len(w.module))}, w.module...)
	needle = append(needle, payload...)
	d := flipped{value: needle, module: w.module, at: len(needle) - 1 - int(st.Hold.Milliseconds())%len(payload), mask: 0x10}
	if err := n.signalFlowstated(syscall.SIGSTOP); err != nil {
		return err
	}
	err = d.find(n.dbPath())
	if err == nil {
		err = d.xor(n.dbPath())
	}
	if cerr := n.signalFlowstated(syscall.SIGCONT); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	w.markDamaged(ip)
	r.log.Info("store byte flipped under flowstated", "module", w.module, "nw_dst", ip)
	// The audit reads the store too; a Reconcile makes the read now.
	if _, err := n.c.Reconcile(cctx, Managed); err != nil {
		r.log.Warn("reconcile after the flip", "err", err)
	}
	why := r.pollDamage(cctx, w.module, ip, true)
	r.rep.Checks.add(InvDamage, errIf(why != ""))
	if why != "" {
		r.violate(InvDamage, "flow nw_dst=%s of module %s damaged in the store under flowstated: %s", ip, w.module, why)
	}
	// The module declares it again.
	set := map[string]string{ip: actions}
	_, err = n.c.Put(cctx, Managed, w.module, w.entries(set)...)
	w.record(set, false, err)
	w.count(r.rep.Ops, OpPut, err)
	if err != nil {
		return nil // the fault ran; the put's outcome is the model's
	}
	why = r.pollDamage(cctx, w.module, ip, false)
	r.rep.Checks.add(InvDamage, errIf(why != ""))
	if why != "" {
		r.violate(InvDamage, "flow nw_dst=%s of module %s declared again after its damage: %s", ip, w.module, why)
	}
	return nil
}

// find sets d.offsets to every place of d.value in the file at path.
func (d *flipped) find(path string) error {
	file, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	d.offsets = d.offsets[:0]
	for i := 0; ; {
		j := bytes.Index(file[i:], d.value)
		if j < 0 {
			break
		}
		d.offsets = append(d.offsets, int64(i+j+d.at))
		i += j + len(d.value)
	}
	if len(d.offsets) == 0 {
		return fmt.Errorf("chaos: record of module %s not found in the file's bytes", d.module)
	}
	return nil
}

// pollDamage waits until the damaged flow ip of module is quarantined with
// a checksum mismatch, left out of List and off the switch (damaged), or
// until the quarantine is lifted and the flow is back (!damaged). It
// returns what still differs when ctx ends, "" once it holds.
func (r *run) pollDamage(ctx context.Context, module, ip string, damaged bool) string {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var why string
	for {
		why = r.damageState(ctx, module, ip, damaged)
		if why == "" || !sleepCtx(ctx, 200*time.Millisecond) {
			return why
		}
	}
}

func (r *run) damageState(ctx context.Context, module, ip string, damaged bool) string {
	st, err := r.n.c.Status(ctx)
	if err != nil {
		return "status: " + err.Error()
	}
	quarantined := false
	for _, q := range st.Quarantined {
		if q.Entry.Module == module && strings.Contains(q.Error, "checksum mismatch") && strings.Contains(q.Error, "bridges/"+Managed+"/flow key") {
			quarantined = true
		}
	}
	stored, err := r.n.c.List(ctx, client.Filter{Bridge: Managed, Module: module})
	if err != nil {
		return "list: " + err.Error()
	}
	listed := slices.ContainsFunc(stored, func(se client.StoredEntry) bool { return fieldOf(se.Text, "nw_dst=") == ip })
	dump, err := r.n.sb.DumpFlows(ctx, Managed)
	if err != nil {
		return "dump: " + err.Error()
	}
	onSwitch := slices.ContainsFunc(dump, func(l string) bool { return fieldOf(l, "nw_dst=") == ip })
	if damaged && (!quarantined || listed || onSwitch) {
		return fmt.Sprintf("want quarantined (checksum mismatch, bucket named), not listed, off the switch: quarantined %v, listed %v, on the switch %v", quarantined, listed, onSwitch)
	}
	if !damaged && (quarantined || !listed || !onSwitch) {
		return fmt.Sprintf("want the quarantine lifted, listed, on the switch: quarantined %v, listed %v, on the switch %v", quarantined, listed, onSwitch)
	}
	return ""
}
