package guard

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Heartbeat is what the guard that holds the lock publishes beside the lease
// after every round trip its OVSDB answers. The round trip is a write
// (ovsconfig.Client.ProveWritable), since releasing the node is one: a guard
// that can only read, e.g. from a read-only copy of the database (ovsdb-server
// --sync-from), reads the right _uuid but could never clear the flag.
// flowstated trusts a guard on this proof, never because it holds the lock: a
// frozen guard stops writing it, a guard that cannot reach its OVSDB never
// writes it, its OVSDB must have taken the write, and the OVSDB and grace it
// names must be flowstated's own (Check).
type Heartbeat struct {
	// PID is the guard's process id (in its own pid namespace).
	PID int
	// Grace is the guard's --grace: how long it lets the lease go
	// unrenewed before it releases the node.
	Grace time.Duration
	// OVSDB is the _uuid of the Open_vSwitch row the guard reached
	// (ovsconfig.Client.Identity); Addr is the address it dials.
	OVSDB, Addr string
	// RoundTrip is the wall-clock time of the last successful round trip.
	RoundTrip time.Time
	// Seq changes with every write.
	Seq uint64
	// LeaseMissing is true while the guard finds no lease file.
	LeaseMissing bool
	// Writable is true when OVSDB took the round trip's write;
	// WriteRefused is its refusal otherwise. Both are zero in the
	// heartbeat of an older guard, whose round trip was only a read.
	Writable     bool
	WriteRefused string
}

// HeartbeatPath is the heartbeat file of the guard of lease.
func HeartbeatPath(lease string) string { return lease + ".heartbeat" }

// HeartbeatInterval is how often a guard with grace makes a round trip and
// writes its heartbeat: several times per grace, at least twice a second.
func HeartbeatInterval(grace time.Duration) time.Duration {
	return min(max(grace/10, 20*time.Millisecond), 500*time.Millisecond)
}

// StaleAfter is how long flowstated (with its grace) lets a heartbeat go
// unchanged before it stops trusting the guard: a few missed beats, with
// room for a slow round trip on a loaded host, and never more than grace.
func StaleAfter(grace time.Duration) time.Duration {
	return min(max(4*HeartbeatInterval(grace), 2*time.Second), max(grace, 4*HeartbeatInterval(grace)))
}

func (h Heartbeat) encode() []byte {
	lease := "ok"
	if h.LeaseMissing {
		lease = "missing"
	}
	writable := "no"
	if h.Writable {
		writable = "yes"
	}
	return fmt.Appendf(nil, "pid=%d\ngrace=%s\novsdb=%s\naddr=%s\nround_trip=%s\nseq=%d\nlease=%s\nwritable=%s\nwrite_refused=%s\n",
		h.PID, h.Grace, h.OVSDB, h.Addr, h.RoundTrip.UTC().Format(time.RFC3339Nano), h.Seq, lease,
		writable, strings.ReplaceAll(h.WriteRefused, "\n", " "))
}

func parseHeartbeat(b []byte) (Heartbeat, error) {
	var h Heartbeat
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "pid":
			h.PID, err = strconv.Atoi(v)
		case "grace":
			h.Grace, err = time.ParseDuration(v)
		case "ovsdb":
			h.OVSDB = v
		case "addr":
			h.Addr = v
		case "round_trip":
			h.RoundTrip, err = time.Parse(time.RFC3339Nano, v)
		case "seq":
			h.Seq, err = strconv.ParseUint(v, 10, 64)
		case "lease":
			h.LeaseMissing = v == "missing"
		case "writable":
			h.Writable = v == "yes"
		case "write_refused":
			h.WriteRefused = v
		default:
			continue
		}
		if err != nil {
			return Heartbeat{}, fmt.Errorf("guard: heartbeat %s: %w", k, err)
		}
		seen[k] = true
	}
	for _, k := range []string{"pid", "grace", "ovsdb", "round_trip", "seq"} {
		if !seen[k] {
			return Heartbeat{}, fmt.Errorf("guard: heartbeat has no %s (a partial write, or not a heartbeat)", k)
		}
	}
	return h, nil
}

// writeHeartbeat replaces the heartbeat file in one rename, so a reader never
// sees half of it, and an unlinked file comes back at the next beat.
func writeHeartbeat(path string, h Heartbeat) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, h.encode(), 0o640); err != nil {
		return fmt.Errorf("guard: heartbeat: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("guard: heartbeat: %w", err)
	}
	return nil
}

// ReadHeartbeat reads the heartbeat file at path.
func ReadHeartbeat(path string) (Heartbeat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Heartbeat{}, fmt.Errorf("guard: heartbeat: %w", err)
	}
	return parseHeartbeat(b)
}

// Proof fields: what Check names when a guard is not trusted.
const (
	FieldRunning   = "running"   // no guard holds the lock
	FieldHeartbeat = "heartbeat" // none, unreadable, stale or not the lock holder's
	FieldOVSDB     = "ovsdb"     // another database than flowstated's
	FieldGrace     = "grace"     // longer than flowstated's
	FieldWritable  = "writable"  // its OVSDB refuses its writes (a read-only copy)
)

// Fields lists every proof field, for reports that name each one.
func Fields() []string {
	return []string{FieldRunning, FieldHeartbeat, FieldOVSDB, FieldWritable, FieldGrace}
}

// ProofError says why a guard is not trusted; Field is one of the Field
// constants.
type ProofError struct {
	Field string
	Msg   string
}

func (e *ProofError) Error() string { return "guard: " + e.Field + ": " + e.Msg }

// Want is what flowstated requires of its guard.
type Want struct {
	// OVSDB is the _uuid of flowstated's own Open_vSwitch row ("" while
	// flowstated cannot read it: no guard can be proven then).
	OVSDB string
	// Grace is flowstated's --guard-grace.
	Grace time.Duration
}

// Check returns nil when h proves a guard that would release this node in
// time: heartbeat younger than StaleAfter(want.Grace) (age, measured by the
// caller), written by the lock holder (holder, 0 if unknown), naming want's
// OVSDB, after a write that OVSDB took, and a grace no longer than want's.
func (h Heartbeat) Check(want Want, age time.Duration, holder int) error {
	if stale := StaleAfter(want.Grace); age > stale {
		return &ProofError{FieldHeartbeat, fmt.Sprintf("the guard (pid %d) made no OVSDB round trip for %v (more than %v): it is frozen or cannot reach %s",
			h.PID, age.Round(time.Millisecond), stale, h.Addr)}
	}
	if holder != 0 && h.PID != holder {
		return &ProofError{FieldHeartbeat, fmt.Sprintf("the heartbeat is pid %d's, the lock is held by pid %d", h.PID, holder)}
	}
	if want.OVSDB == "" {
		return &ProofError{FieldOVSDB, "flowstated cannot read its own OVSDB's identity (not connected to ovsdb-server)"}
	}
	if h.OVSDB != want.OVSDB {
		return &ProofError{FieldOVSDB, fmt.Sprintf("the guard (pid %d) reached Open_vSwitch %s at %s, flowstated's is %s: it would clear the flag of another database",
			h.PID, h.OVSDB, h.Addr, want.OVSDB)}
	}
	if err := h.CheckWrite(); err != nil {
		return err
	}
	if h.Grace > want.Grace {
		return &ProofError{FieldGrace, fmt.Sprintf("the guard (pid %d) waits %v before it releases, longer than flowstated's --guard-grace %v", h.PID, h.Grace, want.Grace)}
	}
	return nil
}

// CheckWrite returns nil when h's round trip was a write its OVSDB took,
// and a FieldWritable ProofError naming the address and OVSDB's refusal
// otherwise: a guard that cannot write could not clear the flag.
func (h Heartbeat) CheckWrite() error {
	switch {
	case h.Writable:
		return nil
	case h.WriteRefused == "":
		return &ProofError{FieldWritable, fmt.Sprintf("the guard (pid %d) does not prove that it can write to %s: it is an older guard, whose proof is only a read; restart it",
			h.PID, h.Addr)}
	default:
		return &ProofError{FieldWritable, fmt.Sprintf("the guard (pid %d) cannot write to the OVSDB at %s, so it could not clear the flag: %s (a read-only copy, e.g. ovsdb-server --sync-from? point the guard's --ovsdb at the node's own ovsdb-server)",
			h.PID, h.Addr, h.WriteRefused)}
	}
}

// Observer is flowstated's reader of a guard's heartbeat. It measures a
// heartbeat's age with flowstated's monotonic clock, from when its content
// last changed, so wall-clock jumps neither prove nor fail a guard; only the
// first reading is aged by the time written in it. Not safe for concurrent
// use.
type Observer struct {
	path    string
	last    Heartbeat
	seen    bool
	changed time.Time
}

// NewObserver reads the heartbeat of the guard of lease.
func NewObserver(lease string) *Observer { return &Observer{path: HeartbeatPath(lease)} }

// Observe reads the heartbeat and returns it with its age.
func (o *Observer) Observe(now time.Time) (Heartbeat, time.Duration, error) {
	h, err := ReadHeartbeat(o.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = &ProofError{FieldHeartbeat, "the guard publishes no heartbeat (" + o.path + "): it has not reached its OVSDB yet, or it is an older guard"}
		} else {
			err = &ProofError{FieldHeartbeat, err.Error()}
		}
		return Heartbeat{}, 0, err
	}
	if !o.seen || h.Seq != o.last.Seq || h.PID != o.last.PID || !h.RoundTrip.Equal(o.last.RoundTrip) {
		if o.seen {
			o.changed = now
		} else {
			o.changed = now.Add(-max(now.Sub(h.RoundTrip), 0))
		}
		o.last, o.seen = h, true
	}
	return h, now.Sub(o.changed), nil
}
