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
	if !on {
		// The kept set's saver retries with a backoff of up to 30 s
		// (server/restore/keptsave.go): until then a change may be
		// in memory only.
		r.fullUntil = time.Now().Add(35 * time.Second)
	}
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

// storeFlip kills flowstated, flips one byte of one record of br-int in the
// stopped store, and starts flowstated on it: the start must be refused
// (exit 1) naming the damage, since a record whose checksum does not match
// must never reach the switch. The node stays without flowstated for hold
// (the guard releases a vswitchd that waits); then the harness puts the byte
// back, as an operator restores the backup taken at the stop, and starts
// flowstated again. Nothing acknowledged is lost that way, so acked stays
// exact for every entry, the damaged one included.
func (r *run) storeFlip(ctx context.Context, st Step) error {
	n := r.n
	rng := rand.New(rand.NewPCG(uint64(st.Pause.Milliseconds())<<32|uint64(st.Hold.Milliseconds()), r.cfg.Seed))
	// The record is chosen from what flowstated lists, and no write may
	// replace it before the kill: its bytes are then the live record's.
	r.gate.Lock()
	d, err := r.pickRecord(ctx, rng)
	if err == nil {
		r.excuse()
		r.flowstatedStops()
		err = n.signalFlowstated(syscall.SIGKILL)
	}
	r.gate.Unlock()
	if err != nil {
		return err
	}
	d.at, d.mask = rng.IntN(len(d.value)), byte(1+rng.IntN(255))
	if err := d.find(n.dbPath()); err != nil {
		return errors.Join(err, r.startFlowstated(ctx))
	}
	if err := d.xor(n.dbPath()); err != nil {
		return errors.Join(err, r.startFlowstated(ctx))
	}
	r.log.Info("store byte flipped", "record", d)
	code, out, err := n.tryStart(ctx, 20*time.Second)
	refused := err == nil && code == 1 && strings.Contains(out, "is corrupt") && strings.Contains(out, "flowstated will not start on it") &&
		strings.Contains(out, "bridges/"+Managed+"/flow key ")
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

// pickRecord chooses one of br-int's stored flows: its record's bytes in the
// file are version, module length, module and payload (then the checksum).
func (r *run) pickRecord(ctx context.Context, rng *rand.Rand) (flipped, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stored, err := r.n.c.List(cctx, client.Filter{Bridge: Managed})
	if err != nil {
		return flipped{}, err
	}
	if len(stored) == 0 {
		return flipped{}, errors.New("chaos: br-int stores no flow")
	}
	se := stored[rng.IntN(len(stored))]
	return flipped{value: recordBytes(se.Module, se.OpenFlow), module: se.Module, text: se.Text}, nil
}

// recordBytes is how the store keeps an entry of module with payload, less
// its checksum (store.encodeRecord, version 2).
func recordBytes(module string, payload []byte) []byte {
	b := append([]byte{2, byte(len(module))}, module...)
	return append(b, payload...)
}

// flipped is a byte flipped in one record.
type flipped struct {
	value   []byte // the record's bytes, as they were
	module  string
	text    string
	at      int     // offset in value
	mask    byte    // what the byte was XORed with
	offsets []int64 // where in the file
}

func (d flipped) String() string {
	return fmt.Sprintf("byte %d of the record of %q (module %s) flipped ^%#x", d.at, d.text, d.module, d.mask)
}

// undo puts the flipped bytes back where the file still holds the flipped
// record: a flowstated that ran on the damaged store (a violation) may have
// reused those pages since, and they are then left alone.
func (d flipped) undo(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	bad := bytes.Clone(d.value)
	bad[d.at] ^= d.mask
	got := make([]byte, len(bad))
	for _, off := range d.offsets {
		start := off - int64(d.at)
		if _, err := f.ReadAt(got, start); err != nil || !bytes.Equal(got, bad) {
			continue
		}
		if _, err := f.WriteAt(d.value, start); err != nil {
			return err
		}
	}
	return f.Sync()
}

// xor flips the byte at every offset.
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
	needle := recordBytes(w.module, payload)
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
	_, err = n.c.Put(cctx, client.Module{Bridge: Managed, Name: w.module}, w.entries(set)...)
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
