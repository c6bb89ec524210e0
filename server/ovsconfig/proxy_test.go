package ovsconfig

import (
	"net"
	"sync"
	"testing"
)

// faultProxy forwards TCP connections to a unix socket and can cut them all
// (as an ovsdb-server restart does) or freeze them (a silent peer: the
// connection stays open, nothing comes back).
type faultProxy struct {
	t      *testing.T
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	frozen chan struct{} // non-nil while frozen; closed by thaw
	closed bool
	nconns int // connections accepted and forwarded so far
}

func newFaultProxy(t *testing.T, unixPath string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &faultProxy{t: t, target: unixPath, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// addr is the proxy's address in OVSDB connection syntax.
func (p *faultProxy) addr() string { return "tcp:" + p.ln.Addr().String() }

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("unix", p.target)
		if err != nil {
			down.Close()
			continue
		}
		if !p.track(down, up) {
			return
		}
		p.wg.Add(2)
		go p.pipe(up, down)
		go p.pipe(down, up)
	}
}

func (p *faultProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	p.nconns++
	return true
}

// accepted counts the connections forwarded so far.
func (p *faultProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nconns
}

// pipe copies src to dst, holding each chunk while the proxy is frozen.
func (p *faultProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.frozen
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or closed: the deferred closes end the other direction
		}
	}
}

// cut closes every forwarded connection; new ones are still accepted.
func (p *faultProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// freeze stops forwarding data on all connections, current and new.
func (p *faultProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

// thaw resumes forwarding.
func (p *faultProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

func (p *faultProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.thaw()
	p.cut()
	p.wg.Wait()
}
