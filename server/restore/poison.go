package restore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/store"
)

// A replay never becomes a crash loop.
//
// An entry that crashes ovs-vswitchd (however it got into the store) would
// crash every vswitchd start, as each start replays it, and with
// flow-restore-wait re-armed the node would stay dark. So flowstated
// watches every replay that sends something, and keeps a small record per
// bridge in the store (store.CrashRecord):
//
//  1. A replay that sent messages is watched. If it failed because the
//     OpenFlow connection dropped, and vswitchd died (it exited leaving its
//     pidfile: vswitchdGone), the evidence says why (deathcause.go: the
//     proc connector's exit status, vswitchd's log). A kill from outside
//     (SIGKILL, SIGTERM, SIGINT, SIGHUP: an operator, the OOM killer) is
//     not counted; a crash, or a death no evidence explains, is a death,
//     recorded durably; deaths older than Config.CrashWindow are
//     forgotten. A death after the replay completed is not counted: by
//     then it cannot be told from an operator's kill -9 or an unrelated
//     crash, and the entries are on the switch.
//  2. Once vswitchd survives a replay (stays up Config.SurviveAfter after
//     it completed), the record keeps a digest of what the
//     switch holds (the desired entries minus the quarantined ones): per
//     digest bucket (a hash of the entry's key, digestBuckets of them) a
//     combination of hashes of key and payload. The deaths are forgotten.
//  3. At the second death in a window the suspects are drawn: the desired
//     entries in the digest buckets that changed since the survived digest
//     (a superset of the entries added or changed since), or every entry
//     when no digest is known or none changed. They are held out, named in
//     status as quarantined, and the next replay restores everything else:
//     the node forwards again at the third vswitchd start at the latest.
//     They are only suspected: believed bad (Bad) when the evidence showed
//     the second death a crash, not known to be otherwise. With that
//     evidence the range is proven as a probe's (Died: the replays that
//     died sent every suspect), so a lone suspect is named at once.
//  4. The suspects are bisected across restarts, one probe at a time, each
//     only after vswitchd survived the previous replay (bisect.go): a Bad
//     range sends its first half back; any other range, or a Bad one of a
//     single entry, all of it (so deaths no evidence explained cost one
//     probe, and if they were kills every suspect is back after it). A
//     probe vswitchd survives is committed (its entries are no longer
//     suspects; the rest of a Bad range stays Bad, unproven); a probe it
//     dies on proves the range it sent bad (SuspectRange.Died), and the
//     rest of its range is no longer believed bad. The death of a probe
//     is not counted in step 3, and every replay after it holds out all
//     remaining suspects, so the node is never held across more than one
//     probe's crash. A kill from outside during a probe (step 1) leaves it
//     under way: the next replay sends it again.
//  5. An entry is named only when a probe that sent it alone died (Died ==
//     1): it is quarantined as poisoned (status, event, metric), until its
//     module changes or deletes it. No entry a dying probe did not send is
//     ever named, whatever killed vswitchd. The other suspects all went
//     back to the switch.
//  6. Two deaths again while suspects are held out (the suspects were not the
//     cause) widen the suspects to every entry.
const digestBuckets = 1024

// Defaults of Config.SurviveAfter and Config.CrashWindow.
const (
	DefaultSurviveAfter = 10 * time.Second
	DefaultCrashWindow  = 10 * time.Minute
)

// poisonState is a bridge's view of its crash record; guarded by the
// bridge's mu.
type poisonState struct {
	rec    store.CrashRecord
	loaded bool
	// watch is the last replay that sent something and that vswitchd has
	// not yet survived (zero when none): startWatch, takeWatch.
	watch replayWatch
	// crashedKeys are the keys of rec.Poisoned, for status.
	crashedKeys map[string]bool
}

// PoisonStatus says what the crash-loop protection of a bridge holds out.
type PoisonStatus struct {
	// Deaths counts the vswitchd deaths during or shortly after a replay
	// in the current window.
	Deaths int
	// Suspects counts the ranges of suspects still held out; Probing is
	// true while a probe is sent back and watched.
	Suspects int
	Probing  bool
	// Poisoned counts the entries found to crash vswitchd.
	Poisoned int
}

// replayWatch is a replay watched for a vswitchd death; failed says it
// ended with an error other than the switch's refusal (the connection
// dropped).
// logAt is the size of vswitchd's log when the replay began (-1: unknown).
type replayWatch struct {
	at       time.Time
	vswitchd string
	logAt    int64
	probe    bool
	failed   bool
}

// startWatch watches a replay sent to vswitchd that ended with err.
func (p *poisonState) startWatch(vswitchd string, logAt int64, err error) {
	var re *RejectedError
	p.watch = replayWatch{at: time.Now(), vswitchd: vswitchd, logAt: logAt, probe: p.rec.Probe != nil, failed: err != nil && !errors.As(err, &re)}
}

// takeWatch ends the watch and returns it (zero when none).
func (p *poisonState) takeWatch() replayWatch {
	w := p.watch
	p.watch = replayWatch{}
	return w
}

func (p *poisonState) status() PoisonStatus {
	return PoisonStatus{Deaths: len(p.rec.Deaths), Suspects: len(p.rec.Suspects), Probing: p.rec.Probe != nil, Poisoned: len(p.rec.Poisoned)}
}

// crashed reports whether k is an entry found to crash vswitchd.
func (p *poisonState) crashed(k string) bool { return p.crashedKeys[k] }

func (p *poisonState) setRec(r store.CrashRecord) {
	p.rec, p.loaded = r, true
	p.crashedKeys = make(map[string]bool, len(r.Poisoned))
	for _, pe := range r.Poisoned {
		p.crashedKeys[string(pe.Key)] = true
	}
}

// loadPoisonLocked reads b's crash record once.
func (e *Engine) loadPoisonLocked(b *bridge) error {
	if b.poison.loaded {
		return nil
	}
	r, err := e.cfg.Store.Crashes().Get(b.name)
	if err != nil {
		return err
	}
	b.poison.setRec(r)
	return nil
}

// savePoisonLocked stores r as b's crash record.
func (e *Engine) savePoisonLocked(b *bridge, r store.CrashRecord) error {
	if err := e.cfg.Store.Crashes().Set(b.name, r); err != nil {
		return err
	}
	if len(r.Suspects) == 0 {
		e.cfg.Metrics.suspects.WithLabelValues(b.name).Set(0)
	}
	b.poison.setRec(r)
	return nil
}

// keyHash and sumHash are the digest's hashes of an entry (step 2): FNV-1a,
// whose low bits mix poorly for keys that differ in their last bytes,
// finished with a mixer (MurmurHash3's fmix64).
func keyHash(k []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(k)
	return fmix(h.Sum64())
}

func sumHash(k, payload []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(k)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(payload)
	return fmix(h.Sum64())
}

func fmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

func digestBucket(k []byte) int { return int(keyHash(k) % digestBuckets) }

// eachDesired calls fn with the key (kind | identity), module and payload
// of every desired entry of bridge, in key order. The slices are valid
// during the call only.
func (e *Engine) eachDesired(bridge string, fn func(k []byte, module string, payload []byte) error) error {
	var k []byte
	err := e.cfg.Store.Entries().ScanFlows(bridge, nil, func(rec store.Record) error {
		k = append(append(k[:0], byte(entry.KindFlow)), rec.ID...)
		return fn(k, string(rec.Module), rec.Payload)
	})
	if err != nil {
		return err
	}
	for _, kind := range []entry.Kind{entry.KindGroup, entry.KindMeter} {
		var es []entry.Entry
		err := e.cfg.Store.Entries().List(store.Filter{Bridge: bridge, Kind: kind}, func(_ string, d entry.Entry) error {
			es = append(es, d)
			return nil
		})
		if err != nil {
			return err
		}
		slices.SortFunc(es, func(a, b entry.Entry) int { return bytes.Compare(a.ID, b.ID) })
		for _, d := range es {
			k = append(append(k[:0], byte(kind)), d.ID...)
			if err := fn(k, d.Module, d.Payload); err != nil {
				return err
			}
		}
	}
	return nil
}

// digest computes the digest of the desired entries of bridge (step 2),
// leaving out those for which skip is true.
func (e *Engine) digest(bridge string, skip func(k string) bool) ([]byte, error) {
	var d [digestBuckets]uint64
	err := e.eachDesired(bridge, func(k []byte, _ string, payload []byte) error {
		if skip != nil && skip(string(k)) {
			return nil
		}
		d[digestBucket(k)] ^= sumHash(k, payload)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 8*digestBuckets)
	for i, x := range d {
		binary.BigEndian.PutUint64(out[8*i:], x)
	}
	return out, nil
}

func inRange(k []byte, r store.SuspectRange) bool {
	return bytes.Compare(k, r.Lo) >= 0 && (len(r.Hi) == 0 || bytes.Compare(k, r.Hi) < 0)
}

func dirty(bitmap []byte, k []byte) bool {
	i := digestBucket(k)
	return i/8 < len(bitmap) && bitmap[i/8]&(1<<(i%8)) != 0
}

// suspect reports whether the entry of key k is a suspect of rec: in a
// dirty bucket, in one of its ranges, and not poisoned.
func suspect(rec *store.CrashRecord, k []byte) bool {
	if len(rec.Suspects) == 0 || !dirty(rec.Dirty, k) {
		return false
	}
	for _, r := range rec.Suspects {
		if inRange(k, r) {
			return true
		}
	}
	return false
}

func poisonedAt(rec *store.CrashRecord, k []byte) int {
	return slices.IndexFunc(rec.Poisoned, func(p store.PoisonedEntry) bool { return bytes.Equal(p.Key, k) })
}

// Reasons of the entries the crash-loop protection holds out.
const (
	reasonPoisoned = "crashed ovs-vswitchd at a replay (found by bisection across vswitchd restarts); kept out until its module changes or deletes it"
	reasonSuspect  = "suspected of crashing ovs-vswitchd (vswitchd died twice during or shortly after a replay); held out while flowstated bisects the suspects across restarts"
)

// poisonHeldLocked returns, by key, the desired entries of b the replay
// leaves out for the crash-loop protection: the poisoned entries and the
// suspects not under probe. A poisoned entry whose module changed or deleted
// it is forgotten.
func (e *Engine) poisonHeldLocked(b *bridge) (map[string]prediction, error) {
	if err := e.loadPoisonLocked(b); err != nil {
		return nil, err
	}
	rec := b.poison.rec
	if len(rec.Suspects) == 0 && len(rec.Poisoned) == 0 {
		e.cfg.Metrics.suspects.WithLabelValues(b.name).Set(0)
		return nil, nil
	}
	held := map[string]prediction{}
	var modules strTable
	found := make([]bool, len(rec.Poisoned))
	err := e.eachDesired(b.name, func(k []byte, module string, payload []byte) error {
		if i := poisonedAt(&rec, k); i >= 0 {
			if pe := rec.Poisoned[i]; pe.Sum == sumHash(k, payload) {
				found[i] = true
				e.cfg.Metrics.poisoned.WithLabelValues(b.name, pe.Module, pe.Name).Set(1)
				held[string(k)] = prediction{kind: entry.Kind(k[0]), module: modules.get(modules.intern(module)), reason: reasonPoisoned}
			}
			return nil
		}
		if suspect(&rec, k) && (rec.Probe == nil || !inRange(k, *rec.Probe)) {
			held[string(k)] = prediction{kind: entry.Kind(k[0]), module: modules.get(modules.intern(module)), reason: reasonSuspect}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	suspects := 0
	for _, p := range held {
		if p.reason == reasonSuspect {
			suspects++
		}
	}
	e.cfg.Metrics.suspects.WithLabelValues(b.name).Set(float64(suspects))
	if slices.Contains(found, false) {
		var kept []store.PoisonedEntry
		for i, p := range rec.Poisoned {
			if found[i] {
				kept = append(kept, p)
			} else {
				e.cfg.Metrics.poisoned.DeleteLabelValues(b.name, p.Module, p.Name)
			}
		}
		e.log.Info("quarantine of poisoned entries lifted: their modules changed or deleted them", "bridge", b.name,
			"entries", len(rec.Poisoned)-len(kept))
		rec.Poisoned = kept
		if err := e.savePoisonLocked(b, rec); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// replayWatchLocked starts watching a replay of b that sent something (step
// 1); vswitchd is the vswitchd it was sent to, logAt the size of its log
// when it began.
func (b *bridge) replayWatchLocked(vswitchd string, logAt int64, err error) {
	b.poison.startWatch(vswitchd, logAt, err)
}

// vswitchdGone reports whether the vswitchd identified as before
// (vswitchdIdentity) died: it exited, and not in order. An orderly stop
// (systemctl stop or restart, ovs-appctl exit) removes its pidfile; an
// abort (a failed assertion), a fatal signal or an OOM kill leaves it, until
// the next vswitchd replaces it. It waits at most two seconds for the
// process to be gone, as a dying vswitchd may still write its core.
func (e *Engine) vswitchdGone(ctx context.Context, before string) bool {
	deadline := time.Now().Add(2 * time.Second)
	for pidAlive(before) {
		if time.Now().After(deadline) || !sleepCtx(ctx, 10*time.Millisecond) {
			return false
		}
	}
	return e.vswitchdIdentity() != ""
}

// pidAlive reports whether the process of a vswitchdIdentity runs (and is
// not a zombie).
func pidAlive(ident string) bool {
	pidText, _, _ := strings.Cut(ident, "@")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return false
	}
	stat, err := os.ReadFile("/proc/" + pidText + "/stat")
	if err != nil {
		return !os.IsNotExist(err)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// connLost is called when b's OpenFlow connection ended while ctx is live:
// if the last replay failed on it and vswitchd died, the death is recorded
// (steps 1, 3, 4, 6).
func (e *Engine) connLost(ctx context.Context, b *bridge, log *slog.Logger) {
	b.mu.Lock()
	w := b.poison.takeWatch()
	b.mu.Unlock()
	if w.at.IsZero() || !w.failed || w.vswitchd == "" {
		return
	}
	if !e.vswitchdGone(ctx, w.vswitchd) {
		return
	}
	cause, why := e.deathCause(ctx, w)
	if cause == causeKilled {
		e.cfg.Metrics.replayKills.WithLabelValues(b.name).Inc()
		log.Warn("ovs-vswitchd was killed from outside during a replay: not counted as a crash", "evidence", why)
		return
	}
	log.Info("ovs-vswitchd died during a replay", "cause", cause, "evidence", why)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := e.recordDeathLocked(b, w.probe, cause, log); err != nil {
		log.Error("recording the death of vswitchd during a replay failed", "err", err)
	}
}

// recordDeathLocked records a death of vswitchd after a replay of b; probe
// says the replay sent a probe back, cause what the evidence said.
func (e *Engine) recordDeathLocked(b *bridge, probe bool, cause deathCause, log *slog.Logger) error {
	if err := e.loadPoisonLocked(b); err != nil {
		return err
	}
	rec := b.poison.rec
	now := time.Now()
	e.cfg.Metrics.replayDeaths.WithLabelValues(b.name).Inc()
	if probe && rec.Probe != nil {
		log.Error("ovs-vswitchd died after a replay that sent suspects back: one of them crashes it; the next replay holds them out",
			"suspects_ranges", len(rec.Suspects))
		e.probeCrashed(&rec, cause == causeCrash)
		if err := e.narrow(b, &rec, log); err != nil {
			return err
		}
		return e.savePoisonLocked(b, rec)
	}
	deaths := rec.Deaths[:0:0]
	for _, d := range rec.Deaths {
		if now.Sub(d) <= e.cfg.CrashWindow {
			deaths = append(deaths, d)
		}
	}
	rec.Deaths = append(deaths, now)
	if len(rec.Deaths) < 2 {
		log.Warn("ovs-vswitchd died during or shortly after a replay; a second death in the window holds out the entries changed since the last replay it survived",
			"window", e.cfg.CrashWindow)
		return e.savePoisonLocked(b, rec)
	}
	widen := len(rec.Suspects) > 0 || rec.Probe != nil
	dirtyMap := make([]byte, digestBuckets/8)
	if rec.Survived != nil && !widen {
		// What the crashed replay did not send cannot have crashed it.
		cur, err := e.digest(b.name, func(k string) bool { return b.quarantine.has(k) || poisonedAt(&rec, []byte(k)) >= 0 })
		if err != nil {
			return err
		}
		for i := range digestBuckets {
			if !bytes.Equal(cur[8*i:8*i+8], rec.Survived[8*i:min(8*i+8, len(rec.Survived))]) {
				dirtyMap[i/8] |= 1 << (i % 8)
			}
		}
	} else {
		for i := range dirtyMap {
			dirtyMap[i] = 0xff
		}
	}
	rec.Deaths, rec.Dirty, rec.Probe, rec.Since = nil, dirtyMap, nil, now
	// Evidence of a crash: the suspects are believed bad, probes halve
	// them. None: all of them are probed first, and come back at once if
	// the deaths were kills from outside.
	rec.Suspects = []store.SuspectRange{{Bad: cause == causeCrash}}
	n, _, _, err := e.countSuspects(b.name, &rec, rec.Suspects[0])
	if err != nil {
		return err
	}
	if n == 0 {
		// Nothing changed since the last survived replay: the cause is
		// not a change, hold out everything.
		for i := range dirtyMap {
			dirtyMap[i] = 0xff
		}
		widen = true
		if n, _, _, err = e.countSuspects(b.name, &rec, rec.Suspects[0]); err != nil {
			return err
		}
	}
	if cause == causeCrash {
		// The replays that crashed sent every suspect: with a crash as
		// their cause, the range is proven as a probe's would be, and a
		// lone suspect is named now (an entry costs two crashes).
		rec.Suspects[0].Died, rec.Suspects[0].Crashed = n, true
	}
	what := "the entries changed since the last replay it survived"
	if widen || b.poison.rec.Survived == nil {
		what = "every entry (no survived replay to compare with, or the earlier suspects were not the cause)"
	}
	log.Error("ovs-vswitchd died twice during or shortly after a replay: the next replays hold out the suspects and bisect them across restarts",
		"suspects", n, "drawn_from", what)
	e.publish(events.Event{Type: events.EntryQuarantined, Bridge: b.name,
		Message: fmt.Sprintf("ovs-vswitchd died twice during or shortly after a replay: %d suspects (%s) held out and bisected across restarts", n, what),
		Attrs:   map[string]string{"reason": reasonSuspect, "entries": strconv.Itoa(n)}})
	if err := e.narrow(b, &rec, log); err != nil {
		return err
	}
	return e.savePoisonLocked(b, rec)
}

// survivedLocked is called when vswitchd stayed up SurviveAfter after a
// replay of b that sent something: the digest of the switch is kept, the
// deaths forgotten, a probe under way committed, and the next probe
// started (steps 2, 4).
func (e *Engine) survivedLocked(b *bridge, log *slog.Logger) error {
	if b.poison.watch.at.IsZero() || b.poison.watch.failed {
		return nil
	}
	probe := b.poison.takeWatch().probe
	if err := e.loadPoisonLocked(b); err != nil {
		return err
	}
	rec := b.poison.rec
	d, err := e.digest(b.name, b.quarantine.has)
	if err != nil {
		return err
	}
	rec.Survived, rec.Deaths = d, nil
	e.cfg.Metrics.survived.WithLabelValues(b.name).Inc()
	log.Info("ovs-vswitchd survived the replay: the digest of what the switch holds is kept", "after", e.cfg.SurviveAfter)
	if probe && rec.Probe != nil && len(rec.Suspects) > 0 {
		probeSurvived(&rec)
		log.Info("ovs-vswitchd survived the suspects sent back: they are restored", "suspect_ranges_left", len(rec.Suspects))
		if err := e.narrow(b, &rec, log); err != nil {
			return err
		}
	}
	if len(rec.Suspects) > 0 && rec.Probe == nil {
		if err := e.nextProbe(b, &rec, log); err != nil {
			return err
		}
	}
	return e.savePoisonLocked(b, rec)
}

// describeForLog names an entry in at most 200 characters of ovs-ofctl
// text.
func describeForLog(d entry.Entry) string {
	s, err := canon.Format(d.Kind, d.Payload)
	if err != nil || s == "" {
		s = fmt.Sprintf("%s %x", d.Kind, d.ID)
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
