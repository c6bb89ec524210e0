package ofconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"antrea.io/libOpenflow/common"
	"antrea.io/libOpenflow/openflow15"
)

// Options configure a connection. The zero value is usable.
type Options struct {
	// EchoInterval: an ECHO_REQUEST is sent when nothing was received for this long. Optional, default 5s.
	EchoInterval time.Duration
	// EchoTimeout: when nothing at all arrives within this long after an ECHO_REQUEST, the switch is declared
	// dead and the connection closed. Optional, default 10s. A frozen vswitchd is detected within
	// EchoInterval+EchoTimeout of its last message. vswitchd answers nothing while it commits a bundle, so
	// EchoInterval+EchoTimeout must stay above the longest commit (about 1 s for 200,000 flows).
	EchoTimeout time.Duration
	// Logger receives connection events. Optional, nil discards.
	Logger *slog.Logger
}

const (
	defaultEchoInterval = 5 * time.Second
	defaultEchoTimeout  = 10 * time.Second
	// bufSize is the size of the buffered reader and writer: big enough that bulk sends make few syscalls.
	bufSize = 256 << 10
)

// Conn is an OpenFlow 1.5 connection to one bridge. It is safe for concurrent use; Close it when done.
type Conn struct {
	nc           net.Conn
	log          *slog.Logger
	echoInterval time.Duration
	echoTimeout  time.Duration
	epoch        time.Time // monotonic base of lastRecv and echo timestamps

	wmu sync.Mutex // guards bw and keeps messages whole on the wire
	bw  *bufio.Writer

	xid      atomic.Uint32
	bundleID atomic.Uint32

	pmu     sync.Mutex
	pending []*waiter

	aux chan []byte // echo requests and replies, bundle discards: written by auxLoop

	echoReplied chan struct{} // the reader tells keepalive that an echo reply arrived

	lastRecv atomic.Int64 // time of the last received message, nanoseconds since epoch

	flowChanges atomic.Pointer[chan struct{}] // told of flow monitor reports (monitor.go); nil: none asked for

	peerVersions uint32 // the switch HELLO's version bitmap; written by the handshake only

	foreign     atomic.Uint64                // messages of another OpenFlow version read (foreign.go)
	lastForeign atomic.Pointer[ForeignError] // the last of them

	done    chan struct{}
	dieOnce sync.Once
	cause   error // why the connection died; written before done is closed
	wg      sync.WaitGroup

	stats counters
}

// Dial connects to the management socket at path (e.g. /var/run/openvswitch/br0.mgmt), negotiates OpenFlow 1.5
// and starts the connection's goroutines. A bridge that does not allow OpenFlow 1.5 yields ErrVersion.
func Dial(ctx context.Context, path string, opts Options) (*Conn, error) {
	if opts.EchoInterval <= 0 {
		opts.EchoInterval = defaultEchoInterval
	}
	if opts.EchoTimeout <= 0 {
		opts.EchoTimeout = defaultEchoTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("ofconn: dial %s: %w", path, err)
	}
	c := &Conn{
		nc:           nc,
		log:          log.With("socket", path),
		echoInterval: opts.EchoInterval,
		echoTimeout:  opts.EchoTimeout,
		epoch:        time.Now(),
		bw:           bufio.NewWriterSize(nc, bufSize),
		aux:          make(chan []byte, 64),
		echoReplied:  make(chan struct{}, 1),
		done:         make(chan struct{}),
	}
	c.xid.Store(1)
	br := bufio.NewReaderSize(nc, bufSize)
	if err := c.handshake(ctx, br); err != nil {
		nc.Close()
		if errors.Is(err, ErrVersion) {
			return nil, err
		}
		return nil, fmt.Errorf("ofconn: handshake on %s: %w", path, err)
	}
	c.lastRecv.Store(c.now())
	c.wg.Add(3)
	go c.readLoop(br)
	go c.auxLoop()
	go c.keepalive()
	c.log.Debug("ofconn: connected")
	return c, nil
}

// handshake sends a HELLO offering only OpenFlow 1.5, checks the switch's HELLO, and waits for a barrier reply so
// that a switch rejecting our HELLO is noticed here rather than as a dead connection later.
func (c *Conn) handshake(ctx context.Context, br *bufio.Reader) error {
	deadline := time.Now().Add(c.echoTimeout)
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ctxDeadline = d, true
	}
	if err := c.nc.SetDeadline(deadline); err != nil {
		return err
	}
	stop := interruptOnDone(ctx, c.nc.SetDeadline)
	defer stop()
	// handshakeErr says when the context ended the handshake; the socket's deadline, set to the context's,
	// may expire a moment before the context reports it.
	handshakeErr := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		if ctxDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return err
	}

	hello, err := helloMsg(c.nextXids(1))
	if err != nil {
		return err
	}
	barrierXid := c.nextXids(1)
	if _, err := c.nc.Write(append(hello, controlMsg(openflow15.Type_BarrierRequest, barrierXid, nil)...)); err != nil {
		return handshakeErr(fmt.Errorf("send hello: %w", err))
	}
	var hdr [headerLen]byte
	gotHello := false
	for {
		f, err := readFrame(br, &hdr)
		if err != nil {
			if gotHello {
				return handshakeErr(fmt.Errorf("wait for barrier reply: %w", err))
			}
			return handshakeErr(fmt.Errorf("wait for hello: %w", err))
		}
		switch {
		case f[1] == openflow15.Type_Hello:
			if !peerSpeaks15(f) {
				return ErrVersion
			}
			c.peerVersions = HelloVersions(f)
			gotHello = true
		case f[1] == openflow15.Type_Error:
			e := decodeError(f)
			if e.Type == openflow15.ET_HELLO_FAILED || (e.Type == openflow15.ET_BAD_REQUEST && e.Code == openflow15.BRC_BAD_VERSION) {
				return ErrVersion
			}
			return fmt.Errorf("switch answered the handshake with %w", e)
		case !gotHello:
			return fmt.Errorf("switch sent %s before HELLO", TypeName(f[1]))
		case f[0] != openflow15.VERSION:
			return ErrVersion
		case f[1] == openflow15.Type_BarrierReply && frameXid(f) == barrierXid:
			return c.nc.SetDeadline(time.Time{})
		case f[1] == openflow15.Type_EchoRequest:
			f[1] = openflow15.Type_EchoReply
			if _, err := c.nc.Write(f); err != nil {
				return handshakeErr(fmt.Errorf("answer echo: %w", err))
			}
		}
	}
}

// helloMsg encodes an OFPT_HELLO with a version bitmap holding OpenFlow 1.5 alone, so that a bridge limited to
// older versions fails the negotiation instead of silently agreeing on one this package cannot speak.
func helloMsg(xid uint32) ([]byte, error) {
	h, err := common.NewHello(openflow15.VERSION)
	if err != nil {
		return nil, err
	}
	h.Header.Xid = xid
	bm := common.NewHelloElemVersionBitmap()
	bm.Bitmaps = []uint32{1 << openflow15.VERSION}
	bm.Length = bm.Len()
	h.Elements = []common.HelloElem{bm}
	return h.MarshalBinary()
}

// peerSpeaks15 reports whether a HELLO allows OpenFlow 1.5.
func peerSpeaks15(f []byte) bool { return HelloVersions(f)&(1<<openflow15.VERSION) != 0 }

// Done is closed when the connection died or was closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err reports why the connection died: nil while it is alive and after Close.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		if errors.Is(c.cause, errClosedByUser) {
			return nil
		}
		return c.cause
	default:
		return nil
	}
}

// Close closes the socket and waits for the connection's goroutines. Pending operations fail with ErrClosed.
func (c *Conn) Close() error {
	c.die(errClosedByUser)
	c.wg.Wait()
	return nil
}

func (c *Conn) die(cause error) {
	c.dieOnce.Do(func() {
		c.cause = cause
		close(c.done)
		c.nc.Close()
		if !errors.Is(cause, errClosedByUser) {
			// The owner reports the loss (Err): one line per event.
			c.log.Debug("ofconn: connection lost", "err", cause)
		}
	})
}

// closedErr returns the error of an operation on a dead connection; call it after done is closed.
func (c *Conn) closedErr() error { return &closedError{cause: c.cause} }

func (c *Conn) now() int64 { return int64(time.Since(c.epoch)) }

// nextXids reserves n consecutive xids and returns the first. Ranges never contain 0, the xid of asynchronous
// messages.
func (c *Conn) nextXids(n uint32) uint32 {
	for {
		end := c.xid.Add(n)
		if first := end - n; first != 0 && first < end {
			return first
		}
	}
}

// readLoop reads every message and hands replies to the operation waiting for their xid.
func (c *Conn) readLoop(br *bufio.Reader) {
	defer c.wg.Done()
	var hdr [headerLen]byte
	for {
		f, err := readFrame(br, &hdr)
		if err == nil && isGroupDescReply(f) {
			f, err = completeGroupDesc(br, f)
		}
		if err != nil {
			c.die(fmt.Errorf("ofconn: read: %w", err))
			return
		}
		c.lastRecv.Store(c.now())
		c.stats.received.Add(1)
		c.stats.bytesReceived.Add(uint64(len(f)))
		if f[0] != openflow15.VERSION {
			c.noteForeign(f)
			continue
		}
		switch f[1] {
		case openflow15.Type_EchoRequest:
			f[1] = openflow15.Type_EchoReply
			if !c.queueAux(f) {
				c.log.Warn("ofconn: echo reply dropped, writer busy")
			}
		case openflow15.Type_EchoReply:
			if len(f) >= headerLen+8 {
				if rtt := c.now() - int64(be.Uint64(f[headerLen:])); rtt >= 0 {
					c.stats.echoRTT.Store(rtt)
				}
			}
			select {
			case c.echoReplied <- struct{}{}:
			default:
			}
		default:
			if c.flowUpdate(f) {
				break
			}
			if w := c.lookup(frameXid(f)); w != nil {
				w.push(f, c.done)
			} else if f[1] == openflow15.Type_Error {
				c.log.Warn("ofconn: error for no pending request", "xid", frameXid(f), "error", decodeError(f).Name)
			} else {
				c.log.Debug("ofconn: unsolicited message", "type", TypeName(f[1]), "xid", frameXid(f))
			}
		}
	}
}

// auxLoop writes small messages that must not wait for their sender: echo traffic and bundle discards.
func (c *Conn) auxLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case b := <-c.aux:
			c.wmu.Lock()
			_, err := c.bw.Write(b)
			if err == nil {
				err = c.bw.Flush()
			}
			c.wmu.Unlock()
			if err != nil {
				c.die(fmt.Errorf("ofconn: write: %w", err))
				return
			}
			c.stats.countSent(b[1], len(b))
		}
	}
}

func (c *Conn) queueAux(b []byte) bool {
	select {
	case c.aux <- b:
		return true
	default:
		return false
	}
}

// keepalive sends an ECHO_REQUEST when nothing was received for echoInterval and declares the switch dead when
// nothing at all arrived within echoTimeout of it. Any message counts as a sign of life, so a busy connection
// sends no echoes. The request goes through auxLoop: a bulk write blocked on a frozen switch cannot delay the
// verdict.
func (c *Conn) keepalive() {
	defer c.wg.Done()
	t := time.NewTimer(c.echoInterval)
	defer t.Stop()
	var echoAt int64 = -1 // when the unanswered echo request was queued, -1 when none is
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		case <-c.echoReplied:
			// Re-arm from now, not from when the echo was sent, so the next echo goes out one interval
			// after this sign of life.
			t.Stop()
		}
		now, last := c.now(), c.lastRecv.Load()
		if echoAt >= 0 && last < echoAt {
			if waited := time.Duration(now - echoAt); waited < c.echoTimeout {
				t.Reset(c.echoTimeout - waited)
				continue
			}
			c.die(fmt.Errorf("%w within %v", errEchoTimeout, c.echoTimeout))
			return
		}
		echoAt = -1
		if idle := time.Duration(now - last); idle < c.echoInterval {
			t.Reset(c.echoInterval - idle)
			continue
		}
		var ts [8]byte
		be.PutUint64(ts[:], uint64(now))
		echoAt = now
		if !c.queueAux(controlMsg(openflow15.Type_EchoRequest, c.nextXids(1), ts[:])) {
			c.log.Warn("ofconn: echo request dropped, writer busy")
		}
		t.Reset(c.echoTimeout)
	}
}

// write runs fn with the buffered writer under the write lock. A write that fails kills the connection: the
// stream may hold part of a message. If ctx ends while fn is blocked on a stalled switch, the write is
// interrupted the same way.
func (c *Conn) write(ctx context.Context, flush bool, fn func(bw *bufio.Writer) error) error {
	select {
	case <-c.done:
		return c.closedErr()
	default:
	}
	c.wmu.Lock()
	stop := interruptOnDone(ctx, c.nc.SetWriteDeadline)
	err := fn(c.bw)
	if err == nil && flush {
		err = c.bw.Flush()
	}
	interrupted := stop()
	c.wmu.Unlock()
	if err == nil {
		return nil
	}
	if interrupted {
		err = fmt.Errorf("ofconn: write interrupted by %w, connection closed: %w", ctx.Err(), err)
	} else {
		err = fmt.Errorf("ofconn: write: %w", err)
	}
	c.die(err)
	return &closedError{cause: err}
}

// interruptOnDone makes I/O on the socket fail (through setDeadline) when ctx ends, until the returned stop is
// called. stop reports whether it fired, and then clears the deadline again.
func interruptOnDone(ctx context.Context, setDeadline func(time.Time) error) (stop func() bool) {
	var mu sync.Mutex
	active, fired := true, false
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if active {
			fired = true
			_ = setDeadline(time.Unix(1, 0)) // fails only on a closed socket, which ends the I/O anyway
		}
	})
	return func() bool {
		stopAfter()
		mu.Lock()
		defer mu.Unlock()
		active = false
		if fired {
			_ = setDeadline(time.Time{})
		}
		return fired
	}
}
