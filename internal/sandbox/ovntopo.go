package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Topology is a logical network for BuildTopology. Every switch gets its
// own /24 (10.S.0.0/24) and a port on one logical router; every port is
// bound to a dummy interface on br-int, so the sandbox's one chassis hosts
// them all.
type Topology struct {
	Switches       int // logical switches, at least 1
	PortsPerSwitch int // logical ports per switch, at least 2
	// ACLs are spread over the switches. Every third is a logged drop of
	// one port's TCP port under a meter; the others allow-related UDP.
	ACLs int
	// LoadBalancers each have a VIP 172.16.0.N:80 and two backends on one
	// switch, so OpenFlow select groups appear.
	LoadBalancers int
	Meters        int // ACL log meters, at least 1 when ACLs > 0
}

// OVNPort is one bound logical port.
type OVNPort struct {
	Name   string // logical port and interface name
	Switch string
	MAC    string
	IP     string
	OFPort int
}

// DeniedFlow is what a drop ACL covers: TCP to IP:TCPPort.
type DeniedFlow struct {
	Port    OVNPort // the destination port the ACL protects
	TCPPort uint16
}

// Network is what BuildTopology created.
type Network struct {
	Ports  []OVNPort
	Denied []DeniedFlow
}

// BuildTopology creates t in the northbound database in one transaction and
// binds its ports on br-int (which ovn-controller must have created: start
// it first). It does not wait for ovn-controller; call Sync, which waits
// for these ports to be up.
func (o *OVN) BuildTopology(ctx context.Context, t Topology) (*Network, error) {
	if t.Switches < 1 || t.Switches > 250 || t.PortsPerSwitch < 2 || t.PortsPerSwitch > 250 {
		return nil, fmt.Errorf("sandbox: topology: want 1-250 switches of 2-250 ports, got %d of %d", t.Switches, t.PortsPerSwitch)
	}
	if t.ACLs > 0 && t.Meters < 1 {
		t.Meters = 1
	}
	if t.LoadBalancers > 250 {
		return nil, fmt.Errorf("sandbox: topology: at most 250 load balancers, got %d", t.LoadBalancers)
	}
	var (
		nb  []string
		net Network
	)
	add := func(args ...string) { nb = append(append(nb, args...), "--") }
	for m := range t.Meters {
		add("meter-add", "acl-meter"+strconv.Itoa(m), "drop", "1000", "pktps")
	}
	add("lr-add", "lr0")
	for s := range t.Switches {
		sw := "sw" + strconv.Itoa(s)
		add("ls-add", sw)
		rp, rmac := "lr0-"+sw, fmt.Sprintf("0a:00:00:%02x:ff:01", s)
		add("lrp-add", "lr0", rp, rmac, fmt.Sprintf("10.%d.0.1/24", s))
		add("lsp-add", sw, sw+"-lr0")
		add("lsp-set-type", sw+"-lr0", "router")
		add("lsp-set-addresses", sw+"-lr0", "router")
		add("lsp-set-options", sw+"-lr0", "router-port="+rp)
		for p := range t.PortsPerSwitch {
			port := OVNPort{
				Name:   fmt.Sprintf("p%d-%d", s, p),
				Switch: sw,
				MAC:    fmt.Sprintf("0a:00:00:%02x:00:%02x", s, p+2),
				IP:     fmt.Sprintf("10.%d.0.%d", s, p+2),
				OFPort: 1 + s*t.PortsPerSwitch + p,
			}
			net.Ports = append(net.Ports, port)
			add("lsp-add", sw, port.Name)
			add("lsp-set-addresses", port.Name, port.MAC+" "+port.IP)
		}
	}
	for a := range t.ACLs {
		s := a % t.Switches
		port := net.Ports[s*t.PortsPerSwitch+(a/t.Switches)%t.PortsPerSwitch]
		sw := port.Switch
		if a%3 == 0 {
			tcp := uint16(1000 + a)
			net.Denied = append(net.Denied, DeniedFlow{Port: port, TCPPort: tcp})
			add("--log", "--meter=acl-meter"+strconv.Itoa(a%t.Meters), "--name=deny"+strconv.Itoa(a),
				"acl-add", sw, "to-lport", "1000", fmt.Sprintf("ip4.dst == %s && tcp.dst == %d", port.IP, tcp), "drop")
		} else {
			add("acl-add", sw, "from-lport", "900", fmt.Sprintf("ip4.src == %s && udp.dst == %d", port.IP, 2000+a), "allow-related")
		}
	}
	for l := range t.LoadBalancers {
		s := l % t.Switches
		b1 := net.Ports[s*t.PortsPerSwitch+l%t.PortsPerSwitch]
		b2 := net.Ports[s*t.PortsPerSwitch+(l+1)%t.PortsPerSwitch]
		lb := "lb" + strconv.Itoa(l)
		add("lb-add", lb, fmt.Sprintf("172.16.0.%d:80", l+1), b1.IP+":8080,"+b2.IP+":8080", "tcp")
		add("ls-lb-add", "sw"+strconv.Itoa(s), lb)
	}
	if _, err := o.Nbctl(ctx, nb[:len(nb)-1]...); err != nil {
		return nil, fmt.Errorf("sandbox: topology: %w", err)
	}
	if len(net.Ports) == 0 {
		return nil, errors.New("sandbox: topology: no ports")
	}
	var vs []string
	for _, p := range net.Ports {
		vs = append(vs, "--", "add-port", OVNBridge, p.Name,
			"--", "set", "Interface", p.Name, "type=dummy",
			"ofport_request="+strconv.Itoa(p.OFPort),
			"external_ids:iface-id="+p.Name)
	}
	if _, err := o.s.Vsctl(ctx, append([]string{"--no-wait"}, vs...)...); err != nil {
		return nil, fmt.Errorf("sandbox: topology: bind ports: %w", err)
	}
	o.mu.Lock()
	for _, p := range net.Ports {
		o.bound = append(o.bound, p.Name)
	}
	o.mu.Unlock()
	return &net, nil
}
