package clienttest_test

import (
	"net"
	"sync"
	"testing"
	"time"
)

// proxy forwards a unix socket to another and can stop forwarding, as a
// frozen server would: it keeps accepting and reading, and delivers nothing
// in either direction until resumed.
type proxy struct {
	ln     net.Listener
	target string
	done   chan struct{}
	// gone receives the time a client closed a connection opened before
	// the pause, during the pause: the client noticed the silence.
	gone chan time.Time

	mu      sync.Mutex
	resumed chan struct{} // closed while forwarding
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func newProxy(t *testing.T, listen, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("unix", listen)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, done: make(chan struct{}), gone: make(chan time.Time, 1),
		resumed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.resumed)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("unix", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		select {
		case <-p.done:
			p.mu.Unlock()
			_, _ = c.Close(), s.Close()
			return
		default:
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		before := p.forwarding()
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(s, c, before)
		go p.pump(c, s, false)
	}
}

// forwarding reports whether the proxy is not paused; p.mu must be held.
func (p *proxy) forwarding() bool {
	select {
	case <-p.resumed:
		return true
	default:
		return false
	}
}

// pump copies src to dst, holding what it reads while paused. watch marks
// a client side opened before a pause, whose end during the pause is
// reported on gone.
func (p *proxy) pump(dst, src net.Conn, watch bool) {
	defer p.wg.Done()
	chunks := make(chan []byte, 256)
	stop := make(chan struct{})
	p.wg.Add(1)
	go func() { // reads on, as the kernel buffers of a frozen process do
		defer p.wg.Done()
		defer close(chunks)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				select {
				case chunks <- b[:n]:
				case <-stop:
					return
				}
			}
			if err != nil {
				p.mu.Lock()
				paused := !p.forwarding()
				p.mu.Unlock()
				if watch && paused {
					select {
					case p.gone <- time.Now():
					default:
					}
				}
				return
			}
		}
	}()
	defer func() {
		close(stop)
		_, _ = dst.Close(), src.Close()
	}()
	for b := range chunks {
		p.mu.Lock()
		resumed := p.resumed
		p.mu.Unlock()
		select {
		case <-resumed:
		case <-p.done:
			return
		}
		if _, err := dst.Write(b); err != nil {
			return
		}
	}
}

func (p *proxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forwarding() {
		p.resumed = make(chan struct{})
	}
}

func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.forwarding() {
		close(p.resumed)
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return
	default:
	}
	close(p.done)
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}
