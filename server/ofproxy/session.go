package ofproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"sync"
	"sync/atomic"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// session is one controller connection and its upstream twin. Each pump
// owns reading its source; close, from either pump or from shutdown, ends
// both. The controller's side is written by the switch-to-controller pump
// and by the recorder's own answers, under downMu.
type session struct {
	p     *Proxy
	down  net.Conn // the controller: a unix or a loopback TCP connection
	up    *net.UnixConn
	once  sync.Once
	pumps atomic.Int32

	downMu sync.Mutex
	downW  *bufio.Writer

	// switchHello is closed once the switch's HELLO has been read, after
	// switchVersions is set.
	switchHello    chan struct{}
	switchVersions uint32

	causeOnce sync.Once
	cause     string // why the session ended: the first pump's error

	// unrec follows what an unrecorded session installs for the Keeper;
	// nil when recording or without one.
	unrec *unrecorded
	// rec is the recording session's recorder, set by the
	// controller-to-switch pump once the HELLOs agreed, before it sends
	// any barrier; its applier holds barrier replies.
	rec atomic.Pointer[recorder]
}

func (s *session) close() {
	s.once.Do(func() {
		s.down.Close()
		s.up.Close()
	})
}

// fail ends the session for err, which is then its cause whichever pump
// ends first.
func (s *session) fail(err error) {
	s.causeOnce.Do(func() { s.cause = causeOf(err) })
	s.close()
}

// pump copies messages in direction dir until either side ends, then ends
// the session. The last pump out removes the session.
func (s *session) pump(dir int) {
	defer s.p.wg.Done()
	var err error
	if dir == ToSwitch {
		err = s.fromController()
	} else {
		err = s.fromSwitch()
	}
	s.fail(err)
	if s.pumps.Add(-1) == 0 {
		s.p.mu.Lock()
		delete(s.p.sessions, s)
		s.p.mu.Unlock()
		if f := s.p.cfg.Disconnected; f != nil {
			f(s.cause)
		}
	}
	if errors.Is(err, errUnknownOutcome) {
		s.p.log.Warn("ofproxy: dropped the controller's connection: a change is not confirmed (the store failed, or its outcome on the switch is unknown); the controller will install again", "error", err)
	}
	if dir == ToController {
		// The switch's side ended first (vswitchd went away) or the
		// controller left; either way the controller is now disconnected.
		s.p.log.Info("ofproxy: controller disconnected", "cause", causeOf(err))
	}
}

func (s *session) count(dir int, m []byte) {
	s.p.stats.Messages[dir].Add(1)
	s.p.stats.types[dir].add(keyOf(m))
}

// fromSwitch relays the switch's messages to the controller.
func (s *session) fromSwitch() error {
	br := bufio.NewReaderSize(s.up, bufSize)
	first := true
	for {
		m, err := ofconn.ReadMessage(br)
		if err != nil {
			if first {
				close(s.switchHello)
			}
			return err
		}
		if first {
			if m[1] == openflow15.Type_Hello {
				s.switchVersions = ofconn.HelloVersions(m)
			}
			close(s.switchHello)
			first = false
		}
		s.count(ToController, m)
		if m[1] == openflow15.Type_BarrierReply {
			if r := s.rec.Load(); r != nil {
				if err := r.a.release(binary.BigEndian.Uint32(m[4:8])); err != nil {
					return err
				}
			}
		}
		// Flush when nothing more is waiting: bursts leave together, a
		// lone message (an echo, a barrier reply) leaves at once.
		if err := s.writeDown(m, br.Buffered() == 0); err != nil {
			return err
		}
	}
}

func (s *session) writeDown(m []byte, flush bool) error {
	s.downMu.Lock()
	defer s.downMu.Unlock()
	if _, err := s.downW.Write(m); err != nil {
		return err
	}
	if flush {
		return s.downW.Flush()
	}
	return nil
}

// reply sends a message of the proxy's own to the controller.
func (s *session) reply(m []byte) error {
	s.p.stats.Answered.Add(1)
	if m[1] == typeError {
		s.p.stats.Errors.Add(1)
	}
	return s.writeDown(m, true)
}

// fromController relays the controller's messages to the switch, and,
// when recording, hands its state changes to the Recorder instead. When it
// ends, the changes it handed over are applied first; a change that failed
// is its error.
func (s *session) fromController() (err error) {
	defer func() {
		if r := s.rec.Load(); r != nil {
			r.a.stop()
			if f := r.a.failure(); f != nil {
				err = f
			}
		}
	}()
	return s.controllerToSwitch()
}

func (s *session) controllerToSwitch() error {
	br := bufio.NewReaderSize(s.down, bufSize)
	bw := bufio.NewWriterSize(s.up, bufSize)
	var r *recorder
	first := true
	for {
		m, err := ofconn.ReadMessage(br)
		if err != nil {
			return err
		}
		s.count(ToSwitch, m)
		if first && m[1] == openflow15.Type_Hello {
			if r = s.recorderFor(m); r != nil {
				s.rec.Store(r)
			}
		}
		first = false
		if r != nil {
			switch classify(m) {
			case state:
				r.pending = append(r.pending, ofconn.Message(m))
				r.pendingBytes += len(m)
				// Handed over when the controller pauses, or once a
				// change's worth is read, so that the applier's bound
				// holds against a controller that never pauses.
				if br.Buffered() == 0 || r.pendingBytes >= maxApply {
					if err := s.handPending(r, bw); err != nil {
						return err
					}
				}
				continue
			case bundleCtrl:
				// Standalone changes just before a bundle wait for its
				// commit and are applied with it (bundleControl): no
				// barrier lies between them, so the switch may apply
				// them together, and a controller that deletes its
				// meters before reinstalling in a bundle (ovn-controller
				// after a reconnect) leaves no moment without the flows
				// that use them.
				if err := bw.Flush(); err != nil {
					return err
				}
				if err := r.a.settle(); err != nil {
					return err
				}
				if err := r.bundleControl(s.p.ctx, m); err != nil {
					return err
				}
				continue
			case bundleAdd:
				if err := r.a.settle(); err != nil {
					return err
				}
				if err := r.bundleAdd(m); err != nil {
					return err
				}
				continue
			}
			if err := s.handPending(r, bw); err != nil {
				return err
			}
			if m[1] == openflow15.Type_BarrierRequest && !(r.committed && !r.told) {
				// A barrier goes to the switch now; its reply waits
				// for the changes before it (applier.release).
				r.a.hold(binary.BigEndian.Uint32(m[4:8]))
			} else {
				// Anything else goes to the switch only after the
				// changes before it are applied; so does the barrier
				// that tells the first install is complete.
				if err := r.a.settle(); err != nil {
					return err
				}
				if m[1] == openflow15.Type_BarrierRequest {
					r.a.hold(binary.BigEndian.Uint32(m[4:8]))
					r.told = true
					if f := s.p.cfg.Installed; f != nil {
						f()
					}
				}
			}
		} else if s.unrec != nil {
			s.unrec.note(m)
		}
		if _, err := bw.Write(m); err != nil {
			return err
		}
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
}

// handPending sends what is buffered for the switch, then hands the
// pending standalone changes to the applier, in the order the controller
// sent them.
func (s *session) handPending(r *recorder, bw *bufio.Writer) error {
	if len(r.pending) == 0 {
		return nil
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	msgs := r.pending
	r.pending, r.pendingBytes = nil, 0
	return r.a.hand(msgs)
}

// recorderFor decides from the two HELLOs whether this session records:
// only when it agrees on OpenFlow 1.5, the version the Recorder takes. A
// session that does not is followed for the Keeper, with or without a
// Recorder (the guard's relay has only a Keeper).
func (s *session) recorderFor(hello []byte) *recorder {
	if s.p.cfg.Recorder == nil && s.p.cfg.Keeper == nil {
		return nil
	}
	select {
	case <-s.switchHello:
	case <-s.p.ctx.Done():
		return nil
	}
	common := ofconn.HelloVersions(hello) & s.switchVersions
	if common == 0 || bits.Len32(common)-1 != of15Version {
		if s.p.cfg.Recorder != nil {
			s.p.log.Warn("ofproxy: controller does not speak OpenFlow 1.5: relaying its connection without recording it; its permanent flows, groups and meters are left alone on the switch, not restored after a vswitchd restart",
				"versions", fmt.Sprintf("%#x", common))
		}
		if k := s.p.cfg.Keeper; k != nil && common != 0 {
			k.Begin()
			s.unrec = &unrecorded{k: k, version: uint8(bits.Len32(common) - 1)}
		}
		return nil
	}
	if s.p.cfg.Recorder == nil {
		return nil
	}
	r := &recorder{s: s, rec: s.p.cfg.Recorder, bundles: make(map[uint32]*openBundle)}
	r.a = newApplier(r)
	return r
}

func causeOf(err error) string {
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		return "closed"
	default:
		return err.Error()
	}
}
