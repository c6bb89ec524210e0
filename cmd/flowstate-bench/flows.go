package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
)

// The generated pipeline, shaped like a CNI's (antrea-like table numbers):
//
//	 0 classifier     in_port -> reg0 (port class), reg1 (pod id)
//	10 spoof guard    in_port + nw_src of the pod
//	20 conntrack      ct(table=21,zone=65520)
//	21 ct state       +inv drop, established -> 70
//	30 services       tcp/udp nw_dst+tp_dst -> reg3 (service id)
//	31 endpoints      reg3 (masked) -> reg2, resubmit
//	40 egress policy  reg1 + nw_dst/24 + tcp/udp tp_dst -> reg2 (rule id); per-pod default drop
//	50 ingress policy nw_src/16 + reg1 + tp_dst -> reg2; +new+trk -> ct(commit,zone)
//	60 commit         +new+trk -> ct(commit,table=70,zone=65520)
//	70 l3 forwarding  reg0 (masked) + nw_dst of the pod -> output
//	80 routes         nw_dst/24 of remote node subnets -> output to the tunnel port
//
// Each line i belongs to one slot of a group of slotsPerGroup lines; every
// slot is a bijection of the group index k, so identities never collide.
const slotsPerGroup = 20

// staticFlows are the fixed part of the pipeline, emitted first.
var staticFlows = []string{
	"table=0,priority=0,actions=drop",
	"table=0,priority=200,in_port=1,actions=set_field:0x1->reg0,goto_table:10",
	"table=10,priority=0,actions=drop",
	"table=20,priority=200,ip,actions=ct(table=21,zone=65520)",
	"table=20,priority=0,actions=goto_table:30",
	"table=21,priority=210,ct_state=+inv+trk,ip,actions=drop",
	"table=21,priority=200,ct_state=-new+trk,ip,actions=goto_table:70",
	"table=21,priority=0,actions=goto_table:30",
	"table=30,priority=0,actions=goto_table:40",
	"table=31,priority=0,actions=drop",
	"table=40,priority=0,actions=goto_table:50",
	"table=50,priority=0,actions=goto_table:60",
	"table=60,priority=200,ct_state=+new+trk,ip,actions=ct(commit,table=70,zone=65520)",
	"table=60,priority=0,actions=goto_table:70",
	"table=70,priority=0,actions=drop",
	"table=80,priority=0,actions=drop",
}

// Port numbers: the gateway is 1, the tunnel tunnelPort, pod k has
// firstPodPort+k.
const (
	tunnelPort   = 2
	firstPodPort = 3
	// maxPods keeps pod ports below OFPP_MAX (0xff00).
	maxPods = 0xff00 - firstPodPort
)

// generateFlows returns n distinct flows in ovs-ofctl syntax, the same for
// the same n.
func generateFlows(n int) ([]string, error) {
	if n < 0 {
		return nil, fmt.Errorf("flows: negative count %d", n)
	}
	if (n+slotsPerGroup-1)/slotsPerGroup > maxPods {
		return nil, fmt.Errorf("flows: %d flows need more than %d pod ports", n, maxPods)
	}
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		if i < len(staticFlows) {
			out = append(out, staticFlows[i])
			continue
		}
		j := i - len(staticFlows)
		out = append(out, generated(j/slotsPerGroup, j%slotsPerGroup))
	}
	return out, nil
}

// podIP is the address of pod k, from 10.244.0.2 on: 10.244.0.0/16 has room
// for every pod port.
func podIP(k int) string { return fmt.Sprintf("10.244.%d.%d", (k+2)>>8&0xff, (k+2)&0xff) }

// generated is slot s of group k. Pod k has ofport k+firstPodPort and id
// k+1 in reg1.
func generated(k, s int) string {
	port, pod := k+firstPodPort, k+1
	proto := func(x int) string {
		if x%2 == 0 {
			return "tcp"
		}
		return "udp"
	}
	switch {
	case s == 0:
		return fmt.Sprintf("table=0,priority=190,in_port=%d,actions=set_field:0x2->reg0,set_field:0x%x->reg1,goto_table:10", port, pod)
	case s == 1:
		return fmt.Sprintf("table=10,priority=200,ip,in_port=%d,nw_src=%s,actions=goto_table:20", port, podIP(k))
	case s == 2:
		return fmt.Sprintf("table=70,priority=200,ip,reg0=0x2/0xf,nw_dst=%s,actions=set_field:0x%x->reg1,output:%d", podIP(k), pod, port)
	case s == 3:
		return fmt.Sprintf("table=40,priority=100,ip,reg1=0x%x,actions=drop", pod)
	case s <= 5: // services: 2 per group
		svc := k*2 + s - 4
		return fmt.Sprintf("table=30,priority=200,%s,nw_dst=10.96.%d.%d,tp_dst=%d,actions=set_field:0x%x->reg3,goto_table:31",
			proto(svc), svc>>8&0xff, svc&0xff, 80+svc%8*1000+svc>>16, svc+1)
	case s <= 7: // endpoints: 2 per group, selected by the low bits of reg3
		ep := k*2 + s - 6
		return fmt.Sprintf("table=31,priority=200,reg3=0x%x/0xfffff,actions=set_field:0x%x->reg2,resubmit(,40)", ep+1, ep+1)
	case s <= 13: // egress rules: 6 per pod
		r := s - 8
		cidr := k*6 + r
		return fmt.Sprintf("table=40,priority=%d,%s,reg1=0x%x,nw_dst=172.%d.%d.0/24,tp_dst=%d,actions=set_field:0x%x->reg2,goto_table:50",
			1000+r, proto(r), pod, 16+cidr>>8%16, cidr&0xff, 1024+r*11, (k*6+r)+1)
	case s <= 17: // ingress rules: 4 per pod, two of them commit in a per-rule zone
		r := s - 14
		src := fmt.Sprintf("192.%d.0.0/16", 168+(k*4+r)%64)
		if r < 2 {
			return fmt.Sprintf("table=50,priority=%d,%s,reg1=0x%x/0xffff,nw_src=%s,tp_dst=%d,actions=set_field:0x%x->reg2,goto_table:60",
				2000+r, proto(r), pod, src, 443+r*10, (k*4+r)+1)
		}
		return fmt.Sprintf("table=50,priority=%d,ct_state=+new+trk,%s,reg1=0x%x/0xffff,nw_src=%s,tp_dst=%d,actions=ct(commit,table=60,zone=%d)",
			2000+r, proto(r), pod, src, 8080+r, 1+(k*4+r)%65000)
	default: // routes to remote node subnets: 2 per group
		route := k*2 + s - 18
		return fmt.Sprintf("table=80,priority=200,ip,nw_dst=%d.%d.%d.0/24,actions=set_field:0x%x->reg0,output:%d",
			11+route>>16, route>>8&0xff, route&0xff, route+1, tunnelPort)
	}
}

// encodeFlows parses every line with flowstate's parser, checks that the
// (table, priority, match) identities are distinct, and returns the FLOW_MODs
// (OpenFlow 1.5) a Go controller would send.
func encodeFlows(lines []string) ([][]byte, error) {
	seen := make(map[string]int, len(lines))
	out := make([][]byte, len(lines))
	var errs []error
	for i, l := range lines {
		fm, err := ofctl.ParseFlow(l)
		if err != nil {
			errs = append(errs, fmt.Errorf("flows: line %d %q: %w", i+1, l, err))
			continue
		}
		b, err := fm.MarshalBinary()
		if err != nil {
			errs = append(errs, fmt.Errorf("flows: line %d %q: encode: %w", i+1, l, err))
			continue
		}
		_, id, err := entry.Identify(entry.KindFlow, b)
		if err != nil {
			errs = append(errs, fmt.Errorf("flows: line %d %q: %w", i+1, l, err))
			continue
		}
		if j, dup := seen[string(id)]; dup {
			errs = append(errs, fmt.Errorf("flows: line %d %q has the identity of line %d %q", i+1, l, j+1, lines[j]))
			continue
		}
		seen[string(id)] = i
		out[i] = b
		if len(errs) > 10 {
			break
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// flowFile is the text ovs-ofctl reads.
func flowFile(lines []string) string { return strings.Join(lines, "\n") + "\n" }
