package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// A foreign uid on every listener (issue 31, fault 5). flowstated runs
// with --module-writer Proxied=uid:0 (the harness's writers run as root)
// and a loopback --openflow-proxy-tcp; foreign-writes runs a child of the
// harness as uid 65534 that writes a flow of module Proxied over gRPC, the
// proxy's unix socket (opened to every uid, so only the rules stand in the
// way) and its TCP listener, each with its own nw_dst in foreignTable. The
// foreign invariant: every such write is refused, and none of them is in
// the store or on the switch, then or at quiescence. During a flowstated
// outage the unix socket is the guard's relay, which holds controllers to
// the same rules.

// foreignUID is the uid of the foreign writer: nobody.
const foreignUID = 65534

// foreignTable is where the foreign writer's flows would go.
const foreignTable = 35

// childEnv makes the harness's binary a foreign writer (MaybeChild).
const childEnv = "FLOWSTATE_CHAOS_FOREIGN"

// foreignJob is what a foreign writer child tries: each write is one
// listener (Network "grpc", "unix" or "tcp") and the flow it sends.
type foreignJob struct {
	Writes []foreignWrite
}

type foreignWrite struct {
	Network, Addr, Flow string
}

// MaybeChild runs the foreign writer and exits when the process was
// started as one (by foreign-writes); otherwise it returns at once. A
// program that runs Run calls it first in main (or TestMain).
func MaybeChild() {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	var job foreignJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		fmt.Println("config:", err)
		os.Exit(2)
	}
	for _, w := range job.Writes {
		fmt.Printf("%s %s\n", w.Network, tryForeign(w))
	}
	os.Exit(0)
}

// tryForeign makes one write and says "admitted" (the write was taken) or
// "refused: ..." (it was not, or the connection failed).
func tryForeign(w foreignWrite) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if w.Network == "grpc" {
		c, err := client.New("unix://" + w.Addr)
		if err != nil {
			return "refused: " + err.Error()
		}
		defer c.Close()
		if _, err := c.Put(ctx, client.Module{Bridge: Managed, Name: Proxied}, client.FlowText(w.Flow)); err != nil {
			return "refused: " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		return "admitted"
	}
	p, _, err := canon.Parse(entry.KindFlow, w.Flow)
	if err != nil {
		return "refused: " + err.Error()
	}
	nc, err := net.DialTimeout(w.Network, w.Addr, 5*time.Second)
	if err != nil {
		return "refused: " + err.Error()
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	// HELLO, the FLOW_MOD and a barrier in one write, as a pipelining
	// controller sends them: nothing waits for the proxy's verdict.
	if _, err := nc.Write(bytes.Join([][]byte{of15Header(0, 8, 1), p, of15Header(20, 8, 7)}, nil)); err != nil {
		return "refused: " + err.Error()
	}
	br := bufio.NewReader(nc)
	for {
		m, err := ofconn.ReadMessage(br)
		if err != nil {
			return "refused: " + err.Error()
		}
		switch m[1] {
		case 21: // BARRIER_REPLY
			return "admitted"
		case 1: // ERROR
			return "refused: OFPT_ERROR " + hex.EncodeToString(m[8:min(len(m), 12)])
		}
	}
}

func of15Header(typ uint8, n uint16, xid uint32) []byte {
	b := make([]byte, 8)
	b[0], b[1] = 6, typ
	binary.BigEndian.PutUint16(b[2:], n)
	binary.BigEndian.PutUint32(b[4:], xid)
	return b
}

// foreignWrites runs one foreign writer child and checks the foreign
// invariant now; the ips it tried are checked again at quiescence.
func (r *run) foreignWrites(ctx context.Context) error {
	n := r.n
	bin, err := n.childBinary()
	if err != nil {
		return err
	}
	// Open the sockets to every uid: only --module-writer may refuse.
	for _, d := range []string{n.dir, filepath.Dir(n.sock), n.proxyDir()} {
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("chaos: foreign-writes: %w", err)
		}
	}
	for _, s := range []string{n.sock, n.proxySocket()} {
		_ = os.Chmod(s, 0o666) // absent while flowstated is away: that write fails as it should
	}
	r.mu.Lock()
	base := len(r.foreignIPs)
	r.mu.Unlock()
	job := foreignJob{}
	var ips []string
	// The proxy's first, while a relay may be on; gRPC, which waits for
	// a flowstated that is away, last.
	for i, l := range [][2]string{{"unix", n.proxySocket()}, {"tcp", n.tcpAddr}, {"grpc", n.sock}} {
		ip := fmt.Sprintf("10.65.%d.%d", (base+i)/250%250, (base+i)%250+1)
		ips = append(ips, ip)
		job.Writes = append(job.Writes, foreignWrite{Network: l[0], Addr: l[1],
			Flow: fmt.Sprintf("table=%d,priority=10,tcp,nw_dst=%s,actions=output:2", foreignTable, ip)})
	}
	r.mu.Lock()
	r.foreignIPs = append(r.foreignIPs, ips...)
	r.mu.Unlock()
	raw, err := json.Marshal(job)
	if err != nil {
		return err
	}
	before := !n.alive() // the unix socket is the guard's relay then
	cctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin)
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: foreignUID, Gid: foreignUID}}
	out, err := cmd.CombinedOutput()
	away := before // informational: the proxy's writes go first
	if err != nil {
		return fmt.Errorf("chaos: foreign-writes: the child as uid %d: %w\n%s", foreignUID, err, out)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		admitted := strings.HasSuffix(line, " admitted")
		r.log.Info("foreign write", "uid", foreignUID, "flowstated_away", away, "result", line)
		r.rep.Checks.add(InvForeign, errIf(admitted))
		op := "foreign-" + strings.Fields(line + " ?")[0]
		if away {
			op += " (flowstated away)"
		}
		r.rep.Ops.add(op, errIf(!admitted)) // refused counts as failed
		if admitted {
			r.violate(InvForeign, "uid %d wrote module %s over %s (flowstated away: %v): %s", foreignUID, Proxied, job.Writes[min(i, len(job.Writes)-1)].Network, away, line)
		}
	}
	sleepCtx(ctx, time.Second)
	r.foreignCheck(ctx, ips)
	return nil
}

// foreignCheck checks that none of ips, the foreign writer's flows, is in
// the store or on br-int. An unobservable look (flowstated or vswitchd
// away) checks what it can.
func (r *run) foreignCheck(ctx context.Context, ips []string) {
	if len(ips) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var found []string
	if stored, err := r.n.c.List(ctx, client.Filter{Bridge: Managed}); err == nil {
		for _, se := range stored {
			for _, ip := range ips {
				if fieldOf(se.Text, "nw_dst=") == ip {
					found = append(found, fmt.Sprintf("stored in module %s: %s", se.Module, se.Text))
				}
			}
		}
	}
	if out, err := r.n.sb.Ofctl(ctx, "--no-stats", "--no-names", "dump-flows", Managed, fmt.Sprintf("table=%d", foreignTable)); err == nil {
		for _, l := range strings.Split(out, "\n") {
			for _, ip := range ips {
				if fieldOf(l, "nw_dst=") == ip {
					found = append(found, "on br-int: "+strings.TrimSpace(l))
				}
			}
		}
	}
	r.rep.Checks.add(InvForeign, errIf(len(found) > 0))
	if len(found) > 0 {
		r.violate(InvForeign, "a write of uid %d reached the node: %s", foreignUID, strings.Join(found, "; "))
	}
}

// childBinary is a copy of the harness's own binary that uid 65534 may
// run (MaybeChild), made once per run.
func (n *node) childBinary() (string, error) {
	if n.child != "" {
		return n.child, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("chaos: foreign-writes: %w", err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return "", fmt.Errorf("chaos: foreign-writes: %w", err)
	}
	dir := filepath.Join(n.dir, "child")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("chaos: foreign-writes: %w", err)
	}
	dst := filepath.Join(dir, "chaos-child")
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return "", fmt.Errorf("chaos: foreign-writes: %w", err)
	}
	n.child = dst
	return dst, nil
}

// freeLoopback picks a free loopback TCP address for the proxy's TCP
// listener (the same one across flowstated's restarts).
func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", errors.Join(errors.New("chaos: a loopback port for the proxy"), err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
