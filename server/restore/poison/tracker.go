package poison

import (
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/store"
)

// Defaults of Config.SurviveAfter and Config.CrashWindow.
const (
	DefaultSurviveAfter = 10 * time.Second
	DefaultCrashWindow  = 10 * time.Minute
)

// Crashes is the store's crash records, one per bridge.
type Crashes interface {
	Get(bridge string) (store.CrashRecord, error)
	Set(bridge string, r store.CrashRecord) error
}

// Desired is the store's reads of a bridge's desired entries: the digest
// and the suspects iterate over them (eachDesired), and a poisoned entry is
// read back to be named.
type Desired interface {
	ScanFlows(bridge string, from []byte, fn func(store.Record) error) error
	List(f store.Filter, fn func(bridge string, e entry.Entry) error) error
	Get(bridge string, kind entry.Kind, id []byte) (entry.Entry, bool, error)
}

// Replayer asks the bridge for a replay, which sends the next probe.
type Replayer interface{ RequestReplay() }

// Vswitchd names the running ovs-vswitchd by its pidfile (pid and start
// time), "" when none runs.
type Vswitchd interface{ Identity() string }

// Metrics are the series the crash-loop protection keeps, labelled by
// bridge (Poisoned also by module and entry).
type Metrics struct {
	Deaths, Kills, Survived *prometheus.CounterVec
	Poisoned, Suspects      *prometheus.GaugeVec
}

// Config is what the trackers of an engine share. All but Events are
// required.
type Config struct {
	Crashes  Crashes
	Desired  Desired
	Vswitchd Vswitchd
	Evidence *Evidence
	// SurviveAfter is how long vswitchd must stay up after a replay for it
	// to count as survived (the caller times it), CrashWindow how long a
	// death counts towards holding out the suspects.
	SurviveAfter, CrashWindow time.Duration
	Metrics                   Metrics
	Events                    *events.Log
	Logger                    *slog.Logger
}

// Tracker is one bridge's view of its crash record. Its fields change only
// through its methods, all called with the bridge's lock held except Death.
type Tracker struct {
	cfg     Config
	bridge  string
	replays Replayer
	log     *slog.Logger

	rec    store.CrashRecord
	loaded bool
	// watch is the last replay that sent something and that vswitchd has
	// not yet survived (zero when none): startWatch, TakeWatch.
	watch Watch
	// crashedKeys are the keys of rec.Poisoned, for status.
	crashedKeys map[string]bool
}

// NewTracker returns the tracker of bridge, whose crash record is read at
// its first use; replays asks the bridge for the replay that sends a probe.
func NewTracker(cfg Config, bridge string, replays Replayer) *Tracker {
	return &Tracker{cfg: cfg, bridge: bridge, replays: replays, log: cfg.Logger}
}

// Status says what the crash-loop protection of a bridge holds out.
type Status struct {
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

// Status returns what the tracker holds out.
func (t *Tracker) Status() Status {
	return Status{Deaths: len(t.rec.Deaths), Suspects: len(t.rec.Suspects), Probing: t.rec.Probe != nil, Poisoned: len(t.rec.Poisoned)}
}

// Crashed reports whether k is an entry found to crash vswitchd.
func (t *Tracker) Crashed(k string) bool { return t.crashedKeys[k] }

// Watch is a replay watched for a vswitchd death (step 1); failed says it
// ended with an error other than the switch's refusal (the connection
// dropped). logAt is the size of vswitchd's log when the replay began (-1:
// unknown).
type Watch struct {
	at       time.Time
	vswitchd string
	logAt    int64
	probe    bool
	failed   bool
}

// Begun is what a replay is watched from: the vswitchd it is sent to, and
// where its lines in vswitchd's log begin.
type Begun struct {
	vswitchd string
	logAt    int64
}

// Begin is called as a replay begins.
func (t *Tracker) Begin() Begun {
	return Begun{vswitchd: t.cfg.Vswitchd.Identity(), logAt: t.cfg.Evidence.logSize()}
}

// Watch starts watching a replay begun at b that sent something (step 1);
// failed says it ended with an error other than the switch's refusal.
func (t *Tracker) Watch(b Begun, failed bool) { t.startWatch(b.vswitchd, b.logAt, failed) }

func (t *Tracker) startWatch(vswitchd string, logAt int64, failed bool) {
	t.watch = Watch{at: time.Now(), vswitchd: vswitchd, logAt: logAt, probe: t.rec.Probe != nil, failed: failed}
}

// TakeWatch ends the watch and returns it (zero when none).
func (t *Tracker) TakeWatch() Watch {
	w := t.watch
	t.watch = Watch{}
	return w
}

func (t *Tracker) setRec(r store.CrashRecord) {
	t.rec, t.loaded = r, true
	t.crashedKeys = make(map[string]bool, len(r.Poisoned))
	for _, pe := range r.Poisoned {
		t.crashedKeys[string(pe.Key)] = true
	}
}

// load reads the crash record once.
func (t *Tracker) load() error {
	if t.loaded {
		return nil
	}
	r, err := t.cfg.Crashes.Get(t.bridge)
	if err != nil {
		return err
	}
	t.setRec(r)
	return nil
}

// save stores r as the crash record.
func (t *Tracker) save(r store.CrashRecord) error {
	if err := t.cfg.Crashes.Set(t.bridge, r); err != nil {
		return err
	}
	if len(r.Suspects) == 0 {
		t.cfg.Metrics.Suspects.WithLabelValues(t.bridge).Set(0)
	}
	t.setRec(r)
	return nil
}

func (t *Tracker) publish(ev events.Event) {
	if t.cfg.Events != nil {
		t.cfg.Events.Publish(ev)
	}
}

// Reasons of the entries the crash-loop protection holds out.
const (
	ReasonPoisoned = "crashed ovs-vswitchd at a replay (found by bisection across vswitchd restarts); kept out until its module changes or deletes it"
	ReasonSuspect  = "suspected of crashing ovs-vswitchd (vswitchd died twice during or shortly after a replay); held out while flowstated bisects the suspects across restarts"
)

// Held is a desired entry a replay leaves out for the crash-loop
// protection; Reason is ReasonPoisoned or ReasonSuspect.
type Held struct {
	Kind   entry.Kind
	Module string
	Reason string
}

// Held returns, by key, the desired entries the replay leaves out: the
// poisoned entries and the suspects not under probe. A poisoned entry whose
// module changed or deleted it is forgotten.
func (t *Tracker) Held() (map[string]Held, error) {
	if err := t.load(); err != nil {
		return nil, err
	}
	rec := t.rec
	if len(rec.Suspects) == 0 && len(rec.Poisoned) == 0 {
		t.cfg.Metrics.Suspects.WithLabelValues(t.bridge).Set(0)
		return nil, nil
	}
	held := map[string]Held{}
	modules := map[string]string{} // one copy of each module's name
	intern := func(m string) string {
		if s, ok := modules[m]; ok {
			return s
		}
		modules[m] = m
		return m
	}
	found := make([]bool, len(rec.Poisoned))
	err := eachDesired(t.cfg.Desired, t.bridge, func(k []byte, module string, payload []byte) error {
		if i := poisonedAt(&rec, k); i >= 0 {
			if pe := rec.Poisoned[i]; pe.Sum == sumHash(k, payload) {
				found[i] = true
				t.cfg.Metrics.Poisoned.WithLabelValues(t.bridge, pe.Module, pe.Name).Set(1)
				held[string(k)] = Held{Kind: entry.Kind(k[0]), Module: intern(module), Reason: ReasonPoisoned}
			}
			return nil
		}
		if suspect(&rec, k) && (rec.Probe == nil || !inRange(k, *rec.Probe)) {
			held[string(k)] = Held{Kind: entry.Kind(k[0]), Module: intern(module), Reason: ReasonSuspect}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	suspects := 0
	for _, h := range held {
		if h.Reason == ReasonSuspect {
			suspects++
		}
	}
	t.cfg.Metrics.Suspects.WithLabelValues(t.bridge).Set(float64(suspects))
	if slices.Contains(found, false) {
		var kept []store.PoisonedEntry
		for i, p := range rec.Poisoned {
			if found[i] {
				kept = append(kept, p)
			} else {
				t.cfg.Metrics.Poisoned.DeleteLabelValues(t.bridge, p.Module, p.Name)
			}
		}
		t.log.Info("quarantine of poisoned entries lifted: their modules changed or deleted them", "bridge", t.bridge,
			"entries", len(rec.Poisoned)-len(kept))
		rec.Poisoned = kept
		if err := t.save(rec); err != nil {
			return nil, err
		}
	}
	return held, nil
}
