package main

import (
	"fmt"
	"slices"
	"time"
)

// median of the samples (the mean of the middle two for an even count).
func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratios are the per-run ratios a[i]/b[i] of paired samples.
func ratios(a, b []time.Duration) []float64 {
	out := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			out = append(out, float64(a[i])/float64(b[i]))
		}
	}
	return out
}

// fmtDur prints a duration with three significant digits in ms or s.
func fmtDur(d time.Duration) string {
	if d < 0 {
		return "−" + fmtDur(-d)
	}
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
}

// fmtMedian is the median, or "n/a" without samples.
func fmtMedian(d []time.Duration) string {
	if len(d) == 0 {
		return "n/a"
	}
	return fmtDur(median(d))
}

// fmtSamples is "median (min–max)", or just the value for one sample.
func fmtSamples(d []time.Duration) string {
	switch len(d) {
	case 0:
		return "n/a" // a figure not measured in some run (durations)
	case 1:
		return fmtDur(d[0])
	}
	return fmt.Sprintf("%s (%s–%s)", fmtDur(median(d)), fmtDur(slices.Min(d)), fmtDur(slices.Max(d)))
}

// fmtRatio is the ratio of the medians, with the range of the per-run
// ratios.
func fmtRatio(a, b []time.Duration) string {
	mb := median(b)
	if mb == 0 {
		return "n/a"
	}
	r := float64(median(a)) / float64(mb)
	rs := ratios(a, b)
	if len(rs) < 2 {
		return fmt.Sprintf("%.2f×", r)
	}
	return fmt.Sprintf("**%.2f×** (%.2f–%.2f)", r, slices.Min(rs), slices.Max(rs))
}

// fmtRate is flows per second at the median time.
func fmtRate(n int, d []time.Duration) string {
	m := median(d)
	if m <= 0 {
		return "n/a"
	}
	r := float64(n) / m.Seconds()
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM flows/s", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.0fk flows/s", r/1e3)
	default:
		return fmt.Sprintf("%.0f flows/s", r)
	}
}

// fmtMiB prints bytes in MiB, the unit memory limits are set in.
func fmtMiB(n uint64) string {
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// fmtCount prints 200000 as 200k and 1000000 as 1M when exact.
func fmtCount(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%dM", n/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%dk", n/1e3)
	default:
		return fmt.Sprint(n)
	}
}
