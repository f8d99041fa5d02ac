package mledger

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/meridian-mq/meridian/bookie/ledger"
)

// appendSim drives an appendCore as the ManagedLedger shell does, with
// the writer, the switch goroutine and the clock scripted by the test.
type appendSim struct {
	t     *testing.T
	cfg   Config
	c     *appendCore
	t0    time.Time
	now   time.Time
	ops   map[string]*appendOp
	names map[*appendOp]string
	sw    *switchReq // the switch in progress, if any
	out   []string
}

func (s *appendSim) printf(format string, args ...any) {
	s.out = append(s.out, fmt.Sprintf(format, args...))
}

func (s *appendSim) op(name string) *appendOp {
	op, ok := s.ops[name]
	if !ok {
		s.t.Fatalf("no append %q", name)
	}
	return op
}

func (s *appendSim) startSwitch(sw *switchReq) {
	if sw == nil {
		return
	}
	if s.sw != nil {
		s.t.Fatalf("a second switch started while one runs")
	}
	s.sw = sw
	old := "none"
	if sw.old != nil {
		old = fmt.Sprint(sw.old.id)
	}
	s.printf("switch from ledger %s (%s)", old, sw.reason)
}

func (s *appendSim) terminate(st mlState, err error) {
	rel, ok := s.c.terminate(st, err)
	switch {
	case !ok:
		s.printf("terminated already")
	case rel != nil:
		s.printf("terminated; release ledger %d", rel.id)
	default:
		s.printf("terminated")
	}
}

func (s *appendSim) opNames(ops []*appendOp) string {
	var ns []string
	for _, op := range ops {
		ns = append(ns, s.names[op])
	}
	return "[" + strings.Join(ns, " ") + "]"
}

func (s *appendSim) state() string {
	st := map[mlState]string{stWriting: "writing", stSwitching: "switching", stNoLedger: "no-ledger",
		stFenced: "fenced", stFailed: "failed", stClosed: "closed"}[s.c.state]
	var b strings.Builder
	fmt.Fprintf(&b, "state=%s", st)
	if cur := s.c.cur; cur != nil {
		fmt.Fprintf(&b, " cur=%d(sub=%d/%dB conf=%d/%dB inflight=%d", cur.id, cur.submitted, cur.submittedBytes, cur.confirmed, cur.confirmedBytes, cur.inflight)
		if cur.failed != nil {
			b.WriteString(" failed")
		}
		if cur.finished {
			b.WriteString(" finished")
		}
		b.WriteString(")")
	}
	var pending []string
	for _, op := range s.c.ops {
		n := s.names[op]
		if op.done {
			n += "✓"
		}
		pending = append(pending, n)
	}
	fmt.Fprintf(&b, " queued=%s ops=[%s]", s.opNames(s.c.queued), strings.Join(pending, " "))
	return b.String()
}

func (s *appendSim) placed(name string, op *appendOp, p placement) {
	switch {
	case p.settled:
		s.printf("%s: refused: %v", name, op.err)
	case p.hand:
		s.printf("%s: ledger %d entry %d", name, op.cur.id, op.entry)
	default:
		s.printf("%s: queued", name)
	}
	s.startSwitch(p.sw)
}

// Scripted in testdata/append; see the file's header for the commands.
func TestAppendCore(t *testing.T) {
	var s *appendSim
	datadriven.RunTest(t, "testdata/append", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "init" && s == nil {
			t.Fatalf("init first")
		}
		if s != nil {
			s.t, s.out = t, nil
		}
		args := func() []string {
			var ns []string
			for _, a := range d.CmdArgs {
				if len(a.Vals) == 0 {
					ns = append(ns, a.Key)
				}
			}
			return ns
		}
		switch d.Cmd {
		case "init":
			s = &appendSim{t: t, cfg: DefaultConfig(), t0: time.Unix(1_000_000, 0), ops: map[string]*appendOp{}, names: map[*appendOp]string{}}
			s.now = s.t0
			d.MaybeScanArgs(t, "max-entries", &s.cfg.MaxEntriesPerLedger)
			d.MaybeScanArgs(t, "max-size", &s.cfg.MaxSizePerLedgerBytes)
			var age string
			if d.MaybeScanArgs(t, "max-age", &age); age != "" {
				s.cfg.MaxLedgerAge, _ = time.ParseDuration(age)
			}
			s.c = &appendCore{ledgerName: "t", rollCfg: &s.cfg, state: stNoLedger}
			var id int64
			if d.MaybeScanArgs(t, "ledger", &id); id != 0 {
				s.c.cur = &curLedger{id: id, createdAt: s.now, readableLAC: -1}
				s.c.state = stWriting
			}
		case "time":
			// time +D: the clock moves D on.
			dur, err := time.ParseDuration(strings.TrimPrefix(d.CmdArgs[0].Key, "+"))
			if err != nil {
				t.Fatal(err)
			}
			s.now = s.now.Add(dur)
			return ""
		case "append":
			// append NAME... [size=N] [refuse]: each NAME appends N bytes
			// (default 10); refuse: the writer refuses it at once as too
			// large (ErrTooLarge, before the next hand-over).
			size := 10
			d.MaybeScanArgs(t, "size", &size)
			for _, name := range args() {
				if name == "refuse" {
					continue
				}
				op := &appendOp{payload: make([]byte, size), entry: -1}
				s.ops[name], s.names[op] = op, name
				p := s.c.add(op, s.now)
				s.placed(name, op, p)
				if p.hand && d.HasArg("refuse") {
					s.result(name, op, -1, fmt.Errorf("%w: %d bytes", ledger.ErrTooLarge, size))
				}
			}
		case "roll-next":
			s.c.rollNext = true
			return ""
		case "ack":
			// ack NAME...: the writer confirms each at its entry id.
			for _, name := range args() {
				op := s.op(name)
				s.result(name, op, op.entry, nil)
			}
		case "fail":
			// fail NAME... [fenced]: the writer fails each (with ErrFenced,
			// or an I/O error).
			err := errors.New("bookie lost")
			if d.HasArg("fenced") {
				err = ledger.ErrFenced
			}
			for _, name := range args() {
				if name != "fenced" {
					s.result(name, s.op(name), -1, err)
				}
			}
		case "finish":
			// finish last=N: the switch closed (or recovered) its old
			// ledger at entry N, every add of it answered.
			if s.sw == nil || s.sw.old == nil {
				t.Fatalf("no switch from a ledger in progress")
			}
			old := s.sw.old
			if old.inflight > 0 {
				t.Fatalf("finish with %d adds in flight", old.inflight)
			}
			var last int64
			d.ScanArgs(t, "last", &last)
			confirmed, err := s.c.settle(old, last, s.sw.reason)
			if err != nil {
				s.printf("settle: %v", err)
				s.terminate(stFailed, err)
				s.c.switchAborted()
				s.sw = nil
				break
			}
			for _, op := range confirmed {
				s.printf("%s: held by ledger %d: %s", s.names[op], old.id, op.pos)
			}
			old.finished = true
			if !s.c.readyForNext() {
				s.printf("switch ends without a new ledger")
				s.sw = nil
			}
		case "recover-failed":
			// The old ledger could not be recovered within SwitchTimeout:
			// the shell fails the managed ledger.
			s.terminate(stFailed, fmt.Errorf("%w: t: could not be recovered", ErrFailed))
			s.c.switchAborted()
			s.sw = nil
		case "create":
			// create ledger=N: the switch created and recorded ledger N;
			// the queued appends are placed on it, in order.
			if s.sw == nil {
				t.Fatalf("no switch in progress")
			}
			var id int64
			d.ScanArgs(t, "ledger", &id)
			hadOld, reason := s.sw.old != nil, s.sw.reason
			s.sw = nil
			q, ok := s.c.switched(&curLedger{id: id, createdAt: s.now, readableLAC: -1}, hadOld, reason)
			if !ok {
				s.printf("terminated meanwhile: release ledger %d", id)
				break
			}
		requeue:
			for i, op := range q {
				hand, stop, sw := s.c.requeue(q, i, s.now)
				switch {
				case hand:
					s.printf("%s: ledger %d entry %d", s.names[op], op.cur.id, op.entry)
				case stop && s.c.err == nil:
					s.printf("%s: queued again", s.opNames(q[i:]))
				}
				s.startSwitch(sw)
				if stop {
					break requeue
				}
			}
		case "create-failed":
			if s.sw == nil {
				t.Fatalf("no switch in progress")
			}
			n := s.c.switchFailed(errors.New("mledger: t: create ledger: no bookies"))
			s.printf("%d queued appends fail", n)
			s.sw = nil
		case "close":
			// Close: new appends fail; Close waits until idle, then
			// terminates (stClosed).
			s.c.closing = true
			s.printf("idle=%v", s.c.idle())
		case "terminate":
			st := map[string]mlState{"fenced": stFenced, "failed": stFailed, "closed": stClosed}[d.CmdArgs[0].Key]
			s.terminate(st, fmt.Errorf("%s", d.CmdArgs[0].Key))
		case "deliver":
			// The deliverer: callbacks of the done appends at the head, in
			// order.
			batch, empty := s.c.takeDelivered()
			for _, op := range batch {
				if op.err != nil {
					s.printf("%s: error: %v", s.names[op], op.err)
				} else {
					s.printf("%s: ok %s", s.names[op], op.pos)
				}
			}
			s.printf("empty=%v ok=%d failed=%d", empty, s.c.counts.ok, s.c.counts.failed)
		default:
			t.Fatalf("unknown command %s", d.Cmd)
		}
		s.printf("%s", s.state())
		if c := s.c.counts; c.resent+c.rollovers+c.ledgerFailures > 0 {
			s.printf("resent=%d rollovers=%d ledger-failures=%d", c.resent, c.rollovers, c.ledgerFailures)
		}
		return strings.Join(s.out, "\n")
	})
}

// result passes the writer's answer for op to the core and carries out the
// verdict as onWriterResult does.
func (s *appendSim) result(name string, op *appendOp, id int64, err error) {
	v := s.c.writerResult(op, id, err)
	switch {
	case v.stale:
		s.printf("%s: settled already", name)
	case v.confirmed:
		s.printf("%s: confirmed %s", name, op.pos)
	case v.fence != nil:
		s.printf("%s: fenced", name)
		s.terminate(stFenced, fmt.Errorf("%w: t: %w", ErrFenced, v.fence))
	case op.done:
		s.printf("%s: failed: %v", name, op.err)
	default:
		s.printf("%s: held", name)
	}
	if v.lateTooLarge || v.wrongID {
		s.printf("%s: logged (late too-large %v, wrong id %v)", name, v.lateTooLarge, v.wrongID)
	}
	s.startSwitch(v.sw)
}
