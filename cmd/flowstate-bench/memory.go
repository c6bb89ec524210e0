package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// memSample is flowstated's memory over one interval, in bytes: VmHWM (the
// peak resident set, file pages of the mapped store included) and the peak
// of RssAnon (anonymous memory, what a cgroup cannot reclaim), sampled.
type memSample struct {
	hwm, anonPeak uint64
}

// memInterval is how often RssAnon is sampled: the kernel keeps no peak of
// it, so a shorter spike can be missed; VmHWM is exact.
const memInterval = 20 * time.Millisecond

// memSampler samples one process's RssAnon until finish. It owns one
// goroutine, stopped by finish.
type memSampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}
	// peak and hwm are the highest RssAnon and VmHWM sampled, written by
	// the goroutine, read after done.
	peak, hwm uint64
}

// startMemSampler starts sampling pid. reset clears the process's VmHWM
// first (clear_refs 5), so that it covers only the interval; a process
// started for the interval needs no reset.
func startMemSampler(pid int, reset bool) (*memSampler, error) {
	if reset {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			return nil, fmt.Errorf("reset VmHWM of flowstated: %w", err)
		}
	}
	s := &memSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s, nil
}

func (s *memSampler) loop() {
	defer close(s.done)
	t := time.NewTicker(memInterval)
	defer t.Stop()
	for {
		if st, err := readProcStatus(s.pid); err == nil {
			s.peak, s.hwm = max(s.peak, st.anon), max(s.hwm, st.hwm)
		}
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

// finish stops the sampler and returns the interval's peaks (zero when the
// process could not be read).
func (s *memSampler) finish() memSample {
	close(s.stop)
	<-s.done
	m := memSample{anonPeak: s.peak, hwm: s.hwm}
	if st, err := readProcStatus(s.pid); err == nil {
		m.hwm = max(m.hwm, st.hwm)
		m.anonPeak = max(m.anonPeak, st.anon)
	}
	return m
}

// procStatus holds the lines of /proc/PID/status the benchmark reports, in
// bytes.
type procStatus struct {
	hwm, rss, anon uint64
}

func readProcStatus(pid int) (procStatus, error) {
	var st procStatus
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	return parseProcStatus(b)
}

// parseProcStatus reads "VmHWM:   1234 kB" and its siblings.
func parseProcStatus(b []byte) (procStatus, error) {
	var st procStatus
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(k) {
		case "VmHWM":
			dst = &st.hwm
		case "VmRSS":
			dst = &st.rss
		case "RssAnon":
			dst = &st.anon
		default:
			continue
		}
		kb, err := strconv.ParseUint(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
		if err != nil {
			return st, fmt.Errorf("proc status %s: %w", k, err)
		}
		*dst = kb << 10
		found++
	}
	if found < 3 {
		return st, fmt.Errorf("proc status: VmHWM, VmRSS or RssAnon missing")
	}
	return st, nil
}
