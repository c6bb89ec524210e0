package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/version"
)

// bundleOptions are support-bundle's flags.
type bundleOptions struct {
	metricsURL string
	db         string
	units      []string
	since      time.Duration
	eventsWait time.Duration
}

// What one part of the bundle may hold at most: a bundle stays small enough
// to attach to a ticket whatever a node logs.
const (
	bundleMetricsMax = 16 << 20
	bundleJournalMax = 20_000 // lines per unit
	bundleEventsMax  = 5_000
)

func newSupportBundle(g *globals) *cobra.Command {
	o := bundleOptions{}
	cmd := &cobra.Command{
		Use:   "support-bundle [FILE]",
		Short: "Collect what a bug report needs into a tar.gz: status, metrics, recent events, logs, the store's stats",
		Long: `Collect what a bug report needs into a tar.gz (default
flowstate-support-HOST-TIME.tar.gz in the current directory):

  status.txt, status.json  flowctl status, both forms
  metrics.txt              flowstated's /metrics (--metrics-url)
  events.jsonl             the events flowstated still retains (up to 5,000,
                           from its second), oldest first
  store.txt                the store file (--db): size, mode, times, and the
                           schema backups beside it; desired entry counts
  journal-UNIT.txt         journalctl -u UNIT for --since, when journalctl
                           runs here (systemd nodes)
  version.txt              this flowctl's version
  README.txt               what was collected, and what could not be and why

No secrets: it reads no environment, no configuration file, no token or key,
and not the store's content (flows are in no part: they are the operator's
to give). Each part is collected on its own: one that fails (flowstated
down, no journal) is named in README.txt and the others are still written,
so run it when something is wrong. The file is written to FILE.tmp and
renamed.`,
		Example: `  flowctl support-bundle
  flowctl support-bundle --since 6h /tmp/node7.tar.gz`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := ""
			if len(args) == 1 {
				path = args[0]
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			written, failed, err := writeSupportBundle(ctx, g, o, path, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", written)
			for _, f := range failed {
				fmt.Fprintf(cmd.ErrOrStderr(), "flowctl: support-bundle: not collected: %s\n", f)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.metricsURL, "metrics-url", "http://127.0.0.1:9452/metrics", "flowstated's /metrics (its --metrics-listen); empty skips it")
	f.StringVar(&o.db, "db", "/var/lib/flowstate/flowstate.db", "flowstated's --db, for its file stats (not read)")
	f.StringSliceVar(&o.units, "unit", []string{"flowstated", "flowstate-guard", "ovs-vswitchd", "ovsdb-server"}, "systemd units whose journal to include (repeatable)")
	f.DurationVar(&o.since, "since", 2*time.Hour, "how far back the journal goes")
	f.DurationVar(&o.eventsWait, "events-wait", 12*time.Second, "how long to wait for flowstated's first event (a heartbeat comes every 10 s) to learn its stream")
	return cmd
}

// bundle is the archive's parts in memory, in order.
type bundle struct {
	names   []string
	content map[string][]byte
	failed  []string
}

func (b *bundle) add(name string, content []byte) {
	b.names = append(b.names, name)
	b.content[name] = content
}

func (b *bundle) fail(part string, err error) {
	b.failed = append(b.failed, fmt.Sprintf("%s: %v", part, err))
}

// writeSupportBundle collects the parts and writes the archive; it returns
// the path written and the parts that could not be collected.
func writeSupportBundle(ctx context.Context, g *globals, o bundleOptions, path string, now time.Time) (string, []string, error) {
	host, _ := os.Hostname()
	stamp := now.UTC().Format("20060102T150405Z")
	dir := "flowstate-support-" + host + "-" + stamp
	if path == "" {
		path = dir + ".tar.gz"
	}
	b := &bundle{content: map[string][]byte{}}
	b.add("version.txt", []byte(version.Get().String("flowctl")+"\n"))

	c, err := newClient(g)
	if err != nil {
		b.fail("flowstated", err)
	} else {
		defer c.Close()
		collectStatus(ctx, g, c, b)
		collectEvents(ctx, g, c, o.eventsWait, b)
	}
	collectMetrics(ctx, o.metricsURL, b)
	collectStore(o.db, b)
	collectJournal(ctx, o.units, o.since, b)

	var readme strings.Builder
	fmt.Fprintf(&readme, "flowstate support bundle\nhost: %s\ntime: %s\nflowctl: %s\nserver: %s\n\ncollected:\n",
		host, now.UTC().Format(time.RFC3339), version.Get().String("flowctl"), g.server)
	for _, n := range b.names {
		fmt.Fprintf(&readme, "  %s (%d bytes)\n", n, len(b.content[n]))
	}
	if len(b.failed) > 0 {
		readme.WriteString("\nnot collected:\n")
		for _, f := range b.failed {
			fmt.Fprintf(&readme, "  %s\n", f)
		}
	}
	b.names = append([]string{"README.txt"}, b.names...)
	b.content["README.txt"] = []byte(readme.String())

	if err := writeTarGz(path, dir, now, b); err != nil {
		return "", nil, fmt.Errorf("support-bundle: %w", err)
	}
	return path, b.failed, nil
}

func collectStatus(ctx context.Context, g *globals, c *client.Client, b *bundle) {
	st, err := flowstatev1.NewFlowStateServiceClient(c.Conn()).Status(ctx, &flowstatev1.StatusRequest{})
	if err != nil {
		b.fail("status", g.explain(ctx, err))
		return
	}
	js, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(st)
	if err != nil {
		b.fail("status.json", err)
	} else {
		b.add("status.json", append(js, '\n'))
	}
	var text bytes.Buffer
	if err := printStatus(&text, st); err != nil {
		b.fail("status.txt", err)
		return
	}
	b.add("status.txt", text.Bytes())
}

// compactedRe reads the oldest retained revision out of a Watch refusal.
var compactedRe = regexp.MustCompile(`oldest retained revision is (\d+)`)

// collectEvents reads the events flowstated retains: a first Watch from
// now learns the stream and its revision (the first event, a heartbeat at
// the latest), a second replays the stream from its oldest retained event
// up to that revision.
func collectEvents(ctx context.Context, g *globals, c *client.Client, wait time.Duration, b *bundle) {
	api := flowstatev1.NewFlowStateServiceClient(c.Conn())
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	live, err := api.Watch(wctx, &flowstatev1.WatchRequest{})
	var head *flowstatev1.Event
	if err == nil {
		var r *flowstatev1.WatchResponse
		if r, err = live.Recv(); err == nil {
			head = r.GetEvent()
		}
	}
	cancel()
	if err != nil {
		b.fail("events", g.explain(ctx, err))
		return
	}
	from := uint64(0)
	if head.GetRevision() > bundleEventsMax {
		from = head.GetRevision() - bundleEventsMax
	}
	var out bytes.Buffer
	for attempt := 0; attempt < 2; attempt++ {
		out.Reset()
		err = replayEvents(ctx, api, head, from, &out)
		m := compactedRe.FindStringSubmatch(fmt.Sprint(err))
		if m == nil {
			break
		}
		oldest, _ := strconv.ParseUint(m[1], 10, 64)
		from = oldest - 1
	}
	if err != nil {
		b.fail("events", g.explain(ctx, err))
		return
	}
	b.add("events.jsonl", out.Bytes())
}

// replayEvents writes the events of head's stream after from (at least
// 1: a Watch cannot ask for revision 1 itself, "after 0" means "new
// only"), up to head's revision, one protojson line each, heartbeats left
// out.
func replayEvents(ctx context.Context, api flowstatev1.FlowStateServiceClient, head *flowstatev1.Event, from uint64, w io.Writer) error {
	from = max(from, 1)
	if head.GetRevision() <= from {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := api.Watch(ctx, &flowstatev1.WatchRequest{FromRevision: from, StreamId: head.GetStreamId()})
	if err != nil {
		return err
	}
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		ev := r.GetEvent()
		if ev.GetType() != "heartbeat" {
			line, err := protojson.Marshal(ev)
			if err != nil {
				return err
			}
			if _, err := w.Write(append(line, '\n')); err != nil {
				return err
			}
		}
		if ev.GetRevision() >= head.GetRevision() {
			return nil
		}
	}
}

func collectMetrics(ctx context.Context, url string, b *bundle) {
	if url == "" {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(mctx, http.MethodGet, url, nil)
	if err != nil {
		b.fail("metrics", err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.fail("metrics", err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, bundleMetricsMax))
	if err != nil {
		b.fail("metrics", err)
		return
	}
	if resp.StatusCode != http.StatusOK {
		b.fail("metrics", fmt.Errorf("GET %s: %s", url, resp.Status))
		return
	}
	b.add("metrics.txt", body)
}

// collectStore describes the store file and the schema backups beside it
// from their metadata only: the store is flowstated's, locked, and holds
// the operator's flows.
func collectStore(db string, b *bundle) {
	var out strings.Builder
	describe := func(p string) {
		fi, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(&out, "%s: %v\n", p, err)
			return
		}
		fmt.Fprintf(&out, "%s: %d bytes, mode %v, modified %s\n", p, fi.Size(), fi.Mode(), fi.ModTime().UTC().Format(time.RFC3339))
	}
	describe(db)
	backups, _ := filepath.Glob(db + ".schema-*.bak")
	for _, p := range backups {
		describe(p)
	}
	if len(backups) == 0 {
		fmt.Fprintf(&out, "no schema backups (%s.schema-N.bak)\n", db)
	}
	b.add("store.txt", []byte(out.String()))
}

func collectJournal(ctx context.Context, units []string, since time.Duration, b *bundle) {
	journalctl, err := exec.LookPath("journalctl")
	if err != nil {
		b.fail("journal", errors.New("journalctl not found (not a systemd node: take the logs from the container runtime, e.g. kubectl logs)"))
		return
	}
	for _, u := range units {
		jctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(jctx, journalctl, "--no-pager", "-o", "short-iso-precise", "-u", u,
			"--since", "-"+strconv.Itoa(int(since.Seconds()))+"s", "-n", strconv.Itoa(bundleJournalMax)).CombinedOutput()
		cancel()
		if err != nil {
			b.fail("journal of "+u, fmt.Errorf("%w: %s", err, bytes.TrimSpace(out)))
			continue
		}
		b.add("journal-"+u+".txt", out)
	}
}

// writeTarGz writes b's parts under dir/ into path.tmp, syncs it and
// renames it to path. The archive's files are 0600: status names clients'
// uids and pids.
func writeTarGz(path, dir string, now time.Time, b *bundle) (err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, n := range b.names {
		c := b.content[n]
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/" + n, Mode: 0o600, Size: int64(len(c)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(c); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
