package mledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
)

// appendCore is the append path's state and the pure rules that move it:
// which ledger an append goes to, when the current ledger is rolled over,
// how the appends pending on a failed ledger are settled once it is
// recovered, and when the managed ledger stops accepting appends. It does
// no I/O, starts no goroutine, reads no clock and takes no lock: the
// ManagedLedger shell (append.go, ml.go) holds mu around every call, passes
// the time in, and carries out what the results ask for (hand an append to
// its ledger's writer, start a ledger switch, record a confirmed entry in
// the tail cache, release a writer, run callbacks). It is embedded in
// ManagedLedger, so the shell reads its fields directly.
//
// Invariants:
//   - ops holds every append not yet delivered, in append order; an op is
//     delivered (takeDelivered) only once it and every op before it is
//     done, so callbacks run in append order;
//   - an op is done with a position only when its ledger confirmed it (the
//     writer's success, or a recovered ledger whose last entry is at or
//     after it): never acknowledged while unconfirmed;
//   - queued holds the ops waiting for a ledger switch, in append order,
//     and an op is in queued or handed to exactly one ledger, never both;
//     ops re-sent after a failure go back ahead of those queued since;
//   - entry ids of a ledger are handed out consecutively (cur.submitted)
//     in the order ops are placed; the shell hands them to the writer in
//     that order (submitMu);
//   - once err is set (fenced, failed, closed) it never changes and every
//     op not done fails with it.
type appendCore struct {
	// ledgerName is the managed ledger's name, for error messages.
	ledgerName string
	// rollCfg holds the rollover limits (MaxEntriesPerLedger,
	// MaxSizePerLedgerBytes, MaxLedgerAge).
	rollCfg *Config

	state     mlState
	err       error // terminal error (stFenced, stFailed, stClosed)
	closing   bool  // Close called: new appends fail
	switching bool  // a switch is in progress (the shell's goroutine)
	rollNext  bool  // the next append starts a new ledger (RollNext)
	cur       *curLedger
	queued    []*appendOp // waiting for a switch, append order
	ops       []*appendOp // not yet delivered, append order
	counts    appendCounts
}

// maxTries bounds how many failed ledgers one append is re-sent across
// before it fails.
const maxTries = 3

// appendCounts are the append path's counters (see Stats).
type appendCounts struct {
	ok, failed, resent, rollovers, ledgerFailures int64
}

type mlState int

const (
	stWriting   mlState = iota // cur is writable
	stSwitching                // a switch is replacing cur; appends queue
	stNoLedger                 // the last switch could not create a ledger; the next append retries
	stFenced                   // terminal: another owner
	stFailed                   // terminal: outcome of appends unknown
	stClosed                   // terminal: closed
)

// curLedger is the ledger being written.
type curLedger struct {
	id int64
	// w is the shell's handle on the ledger's writer; the core never uses
	// it.
	w         *ledger.Writer
	createdAt time.Time
	// submitted/submittedBytes: entry ids handed out (the writer assigns
	// the same ids, in the same order: submissions are serialized).
	submitted, submittedBytes int64
	// confirmed/confirmedBytes: LAC+1 and the bytes up to it.
	confirmed, confirmedBytes int64
	// inflight: ops handed to the writer whose callback has not run.
	inflight int
	// failed: the writer's first non-fencing error.
	failed error
	// readableLAC: a lower bound of the LAC the bookies know (piggybacked
	// on later adds); entries above it can only be read from the cache.
	readableLAC int64
	// finished: closed (or recovered) by the switch; no longer open.
	finished bool
}

// appendOp is one AppendAsync call.
type appendOp struct {
	payload []byte
	cb      func(Position, error)
	cur     *curLedger // the ledger it was handed to, nil while queued
	entry   int64      // the entry id it was handed as
	carried int64      // the writer's LAC when it was handed over
	held    error      // failed by a writer failure; outcome pending recovery
	tries   int
	done    bool
	pos     Position
	err     error
	// start is when AppendAsync took it (monotonic; zero in the core's
	// tests): the add latency's start (ManagedLedger.AddLatency).
	start time.Time
}

// switchReq asks the shell to replace old (nil: there is no ledger) with a
// new ledger, for reason ("entries", "size", "age", "requested",
// "failure", "no ledger"). The core is in stSwitching until switched,
// switchFailed or readyForNext ends it.
type switchReq struct {
	old    *curLedger
	reason string
}

// placement is where add or place put an op.
type placement struct {
	// hand: the op has its entry id in op.cur; the shell hands it to that
	// ledger's writer now, in placement order.
	hand bool
	// settled: the op is done already (refused); the shell signals the
	// deliverer.
	settled bool
	// sw: a switch must start (the op is queued behind it).
	sw *switchReq
}

// refusal returns the error a new append fails with, or nil if appends are
// accepted.
func (c *appendCore) refusal() error {
	if c.err == nil && !c.closing {
		return nil
	}
	if c.err != nil {
		return c.err
	}
	return fmt.Errorf("%w: %s", ErrClosed, c.ledgerName)
}

// add takes a new append: refused (done at once with refusal's error, and
// delivered in order behind the pending ones), or placed.
func (c *appendCore) add(op *appendOp, now time.Time) placement {
	if err := c.refusal(); err != nil {
		op.done, op.err = true, err
		c.ops = append(c.ops, op)
		return placement{settled: true}
	}
	c.ops = append(c.ops, op)
	return c.place(op, now)
}

// refusedAtOnce counts an append refused while the deliverer is stopped
// (the shell runs its callback at once).
func (c *appendCore) refusedAtOnce() { c.counts.failed++ }

// place decides where op goes: to the current ledger, with the next entry
// id, or queued behind a ledger switch (started here when the current
// ledger is due for rollover, RollNext was called, or there is no ledger).
func (c *appendCore) place(op *appendOp, now time.Time) placement {
	switch c.state {
	case stWriting:
		cur := c.cur
		r := rollReason(c.rollCfg, cur.submitted, cur.submittedBytes, cur.createdAt, now)
		if r == "" && c.rollNext {
			r = "requested"
		}
		if r != "" {
			c.rollNext = false
			c.queued = append(c.queued, op)
			return placement{sw: c.startSwitch(cur, r)}
		}
		op.cur, op.entry = cur, cur.submitted
		cur.submitted++
		cur.submittedBytes += int64(len(op.payload))
		cur.inflight++
		return placement{hand: true}
	case stNoLedger:
		c.rollNext = false
		c.queued = append(c.queued, op)
		return placement{sw: c.startSwitch(nil, "no ledger")}
	default: // stSwitching (terminal states refuse in add)
		c.queued = append(c.queued, op)
		return placement{}
	}
}

func (c *appendCore) startSwitch(old *curLedger, reason string) *switchReq {
	c.state = stSwitching
	c.switching = true
	return &switchReq{old: old, reason: reason}
}

// writerVerdict is what writerResult asks of the shell.
type writerVerdict struct {
	// drained: op's ledger has no add in flight any more (wake waiters).
	drained bool
	// stale: op was settled already (fenced, closed): nothing else to do,
	// not even signalling the deliverer.
	stale bool
	// confirmed: op is stored at op.pos: the shell records the entry
	// (last confirmed, counts, tail cache, notify).
	confirmed bool
	// wrongID: the writer assigned an entry id other than op.entry (the
	// shell logs it; op is confirmed at the writer's id).
	wrongID bool
	// lateTooLarge: the writer refused op as too large after later ops
	// were handed to it (the shell logs it).
	lateTooLarge bool
	// fence: non-nil: the ledger was fenced; the shell fences the managed
	// ledger with this cause (fenceLocked).
	fence error
	// firstFailure: non-nil: the ledger's writer failed for the first time
	// (the shell logs it).
	firstFailure error
	// sw: a switch must start to recover the failed ledger.
	sw *switchReq
}

// writerResult takes the writer's answer for op: its entry id, or an
// error. ErrTooLarge fails op alone; ErrFenced fences; any other error
// holds op until the failed ledger is recovered (settle), starting the
// switch that recovers it if op's ledger is still the current one.
func (c *appendCore) writerResult(op *appendOp, id int64, err error) writerVerdict {
	var v writerVerdict
	cur := op.cur
	cur.inflight--
	v.drained = cur.inflight == 0
	if op.done {
		v.stale = true
		return v
	}
	switch {
	case err == nil:
		v.wrongID = id != op.entry
		c.confirm(op, id)
		v.confirmed = true
	case errors.Is(err, ledger.ErrTooLarge):
		// Refused synchronously, before taking an entry id (the shell
		// still holds submitMu): give the id back.
		if cur.submitted == op.entry+1 {
			cur.submitted--
			cur.submittedBytes -= int64(len(op.payload))
		} else {
			v.lateTooLarge = true
		}
		op.done, op.err = true, fmt.Errorf("mledger: %s: %w", c.ledgerName, err)
	case errors.Is(err, ledger.ErrFenced):
		v.fence = err
	default:
		op.held = err
		if cur.failed == nil {
			cur.failed = err
			v.firstFailure = err
			if c.state == stWriting && c.cur == cur {
				v.sw = c.startSwitch(cur, "failure")
			}
		}
	}
	return v
}

// confirm marks op stored at entry id of its ledger.
func (c *appendCore) confirm(op *appendOp, id int64) {
	cur := op.cur
	op.done, op.pos, op.held = true, Position{cur.id, id}, nil
	cur.confirmed = max(cur.confirmed, id+1)
	cur.confirmedBytes += int64(len(op.payload))
	cur.readableLAC = max(cur.readableLAC, op.carried)
}

// settle completes the switch's first step once old is closed at last (a
// rollover: its writer's LAC; after a failure: the last entry recovery
// found) and no add is in flight on it. Ops old holds (entry <= last) are
// confirmed and returned, in order, for the shell to record; the others
// are certainly not in the log: each is re-queued, ahead of the ops queued
// since, unless it has now been on maxTries ledgers (then it fails with
// the error that held it). An error means old closed below entries already
// confirmed: the shell fails the managed ledger with it. old.finished is
// left to the shell (finishLedgerLocked).
func (c *appendCore) settle(old *curLedger, last int64, reason string) ([]*appendOp, error) {
	if last+1 < old.confirmed {
		return nil, fmt.Errorf("%w: %s: ledger %d closed at entry %d below its confirmed entries (%d)", ErrFailed, c.ledgerName, old.id, last, old.confirmed)
	}
	if reason == "failure" || old.failed != nil {
		c.counts.ledgerFailures++
	}
	var confirmed, resend []*appendOp
	for _, op := range c.ops {
		if op.cur != old || op.done {
			continue
		}
		if op.entry >= 0 && op.entry <= last {
			c.confirm(op, op.entry) // the recovered ledger holds it
			confirmed = append(confirmed, op)
			continue
		}
		// Recovery closed the ledger before this entry: it is certainly
		// not in the log, so sending it again cannot duplicate it.
		op.tries++
		if op.tries >= maxTries {
			op.done, op.err = true, fmt.Errorf("mledger: %s: append failed on %d ledgers: %w", c.ledgerName, op.tries, op.held)
			continue
		}
		op.cur, op.entry, op.held = nil, -1, nil
		resend = append(resend, op)
		c.counts.resent++
	}
	c.queued = append(resend, c.queued...)
	old.confirmed = last + 1
	return confirmed, nil
}

// readyForNext reports, once the old ledger is finished, whether the
// switch goes on to create the next ledger: not once terminated, nor when
// closing with nothing queued (then there is no ledger and the switch
// ends).
func (c *appendCore) readyForNext() bool {
	if c.err != nil || (c.closing && len(c.queued) == 0) {
		if c.err == nil {
			c.state = stNoLedger
		}
		c.switching = false
		return false
	}
	return true
}

// switchAborted ends a switch that stops because the managed ledger
// terminated meanwhile.
func (c *appendCore) switchAborted() { c.switching = false }

// switchFailed ends a switch that could not create or record the next
// ledger: the queued ops fail with err, and the next append starts another
// switch. It returns how many were queued.
func (c *appendCore) switchFailed(err error) int {
	n := len(c.queued)
	for _, op := range c.queued {
		if !op.done {
			op.done, op.err = true, err
		}
	}
	c.queued = nil
	if c.err == nil {
		c.state = stNoLedger
	}
	c.switching = false
	return n
}

// switched ends a switch with next recorded in the list: it becomes the
// current ledger, and the queued ops are returned for the shell to place
// again one by one (requeue), in order. false: the managed ledger
// terminated meanwhile; the shell releases next's writer.
func (c *appendCore) switched(next *curLedger, hadOld bool, reason string) ([]*appendOp, bool) {
	c.switching = false
	if c.err != nil {
		return nil, false
	}
	c.cur = next
	c.state = stWriting
	if hadOld && reason != "failure" {
		c.counts.rollovers++
	}
	q := c.queued
	c.queued = nil
	return q, true
}

// requeue places q[i], one of the ops switched returned, on the new
// ledger. hand: the shell hands it to the writer and goes on with q[i+1];
// stop: the shell stops (terminated, or the new ledger is already due for
// rollover: q[i:] is queued again, ahead of anything appended since, and
// sw may ask for the next switch). Neither: q[i] was settled meanwhile;
// go on.
func (c *appendCore) requeue(q []*appendOp, i int, now time.Time) (hand, stop bool, sw *switchReq) {
	op := q[i]
	if op.done { // settled by a termination meanwhile
		return false, false, nil
	}
	if c.err != nil {
		return false, true, nil
	}
	p := c.place(op, now)
	if !p.hand {
		c.queued = append(c.queued, q[i+1:]...)
		return false, true, p.sw
	}
	return true, false, nil
}

// terminate moves to a terminal state: every undelivered op fails with
// err and the queue empties. It returns the current ledger when the shell
// must release its writer (it is open and the state is not stClosed, where
// Close closes it itself), marked finished. false: terminated already.
func (c *appendCore) terminate(st mlState, err error) (release *curLedger, ok bool) {
	if c.err != nil {
		return nil, false
	}
	c.state, c.err = st, err
	for _, op := range c.ops {
		if !op.done {
			op.done, op.err = true, err
		}
	}
	c.queued = nil
	if cur := c.cur; cur != nil && !cur.finished && st != stClosed {
		cur.finished = true
		return cur, true
	}
	return nil, true
}

// takeDelivered removes and returns the done ops at the head of ops, whose
// callbacks the shell runs in this order; empty: no op is left undelivered.
func (c *appendCore) takeDelivered() (batch []*appendOp, empty bool) {
	n := 0
	for n < len(c.ops) && c.ops[n].done {
		if c.ops[n].err != nil {
			c.counts.failed++
		} else {
			c.counts.ok++
		}
		n++
	}
	batch = append([]*appendOp(nil), c.ops[:n]...)
	rest := copy(c.ops, c.ops[n:])
	clear(c.ops[rest:])
	c.ops = c.ops[:rest]
	return batch, len(c.ops) == 0
}

// idle reports whether no append is pending and no switch runs (Close
// waits for it).
func (c *appendCore) idle() bool { return len(c.ops) == 0 && !c.switching }
