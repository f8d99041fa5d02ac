package failover

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrRefused is wrapped by Output.Refused when a manual command is refused.
var ErrRefused = errors.New("failover: refused")

// Config configures one Core: one namespace as seen from one region.
type Config struct {
	// Region is the local region, the one whose brokers act on the
	// Output's Instruction.
	Region string
	Policy Policy
	Lease  LeaseRules
}

// Core is the pure failover decision for one namespace in one region: a
// small state machine, like raft's RawNode. Step takes the time, the
// region's health view, what the global store holds and the lease this
// region holds, and returns what the region's brokers do and what to
// commit. It reads no clock, opens no socket, starts no goroutine and does
// not log. Not safe for concurrent use: one shell goroutine owns it.
type Core struct {
	cfg Config
	mem memory
}

// NewCore returns a Core with empty memory, or an error if cfg is invalid.
func NewCore(cfg Config) (*Core, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Lease.Validate(); err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		return nil, errors.New("failover: config: empty local region")
	}
	return &Core{cfg: cfg, mem: memory{regions: map[string]*seen{}}}, nil
}

// Config returns the core's configuration.
func (c *Core) Config() Config { return c.cfg }

// Command is an operator's `meridian admin failover NAMESPACE --to REGION`.
type Command struct {
	To string
}

// Input is one step's input.
type Input struct {
	// Now is the local monotonic time. A Now before an earlier step's is
	// taken as that earlier time.
	Now time.Time
	// Regions is the local view of every region's health. A region of the
	// policy missing here is down.
	Regions []RegionStatus
	// Committed is the global store's state as last read.
	Committed Committed
	// Lease is the lease this region holds.
	Lease LocalLease
	// Command is a manual command to decide on in this step, or nil.
	Command *Command
}

// Kind is what an Instruction tells the local region's brokers to do with
// the namespace's lookups, producers and subscriptions.
type Kind uint8

const (
	// RetryLater: answer lookups, produce and subscribe with a retriable
	// error (ServiceNotReady); close nothing for good. A stale region,
	// one catching up, one without its lease, and a standby whose active
	// region is down answer this.
	RetryLater Kind = iota
	// Serve: this is the active region and holds its lease: answer
	// lookups with the local owner, accept produce and subscriptions.
	Serve
	// Redirect: answer lookups with region To's brokers; close the
	// namespace's local producers and consumers so clients look up again.
	Redirect
	// Hold: the active region is suspected; hold lookups until Until (or
	// until the next step changes the answer) instead of redirecting
	// clients to a region that may be dying.
	Hold
)

func (k Kind) String() string {
	switch k {
	case Serve:
		return "serve"
	case Redirect:
		return "redirect"
	case Hold:
		return "hold"
	}
	return "retry-later"
}

// Instruction is what the local region's brokers do for the namespace. No
// instruction maps to TopicNotFound, TopicTerminated or ProducerFenced,
// which make clients give up.
type Instruction struct {
	Kind   Kind
	To     string    // Redirect: the region to send clients to
	Until  time.Time // Hold: release held lookups by then
	Reason string
}

// AcceptsProduce reports whether brokers may accept produce and
// subscriptions under the instruction.
func (i Instruction) AcceptsProduce() bool { return i.Kind == Serve }

// ProposalKind says why a proposal was made.
type ProposalKind uint8

const (
	// Initial: the namespace had no record; make the first region that is
	// up active.
	Initial ProposalKind = iota + 1
	// Failover: a standby saw the active region down for FailoverDelay (or
	// its lease gone for FailoverDelay + TTL) and no live lease.
	Failover
	// Handover: the active region saw itself down for FailoverDelay and
	// hands the namespace to the first region that is up.
	Handover
	// SwitchBack: the active region hands the namespace back to a more
	// preferred region that has been up for SwitchBackDelay and caught up.
	SwitchBack
	// Manual: `meridian admin failover --to`.
	Manual
)

func (k ProposalKind) String() string {
	switch k {
	case Initial:
		return "initial"
	case Failover:
		return "failover"
	case Handover:
		return "handover"
	case SwitchBack:
		return "switch-back"
	case Manual:
		return "manual"
	}
	return fmt.Sprintf("ProposalKind(%d)", uint8(k))
}

// Proposal is a change of the active region to commit by compare-and-swap:
// write Record(...) only if the stored epoch is still From (for From 0:
// only if no record exists). A lost CAS means re-read and Step again.
type Proposal struct {
	Kind      ProposalKind
	From      uint64 // the epoch the proposal was decided on
	NewEpoch  uint64 // From + 1
	NewActive string
	Previous  string
	CatchUp   bool
	Reason    string
}

// Record returns the record to write, stamped with the proposer's wall
// clock at (informational).
func (p Proposal) Record(at time.Time) Record {
	return Record{Active: p.NewActive, Epoch: p.NewEpoch, Previous: p.Previous, CatchUp: p.CatchUp, Reason: p.Reason, Since: at}
}

// Output is one step's decision.
type Output struct {
	Instruction Instruction
	// Proposal, if not nil, is to be committed by CAS on the epoch.
	Proposal *Proposal
	// Refused is set when Input.Command was refused; it wraps ErrRefused
	// and says why.
	Refused error
	// AcquireLease: this region is active in the current epoch and holds
	// no lease for it: acquire one (create the lease key, only if absent
	// and the record is still this epoch with this region active).
	AcquireLease bool
	// ReleaseLease: this region holds a lease for an epoch in which it is
	// not active (or an older one): stop acknowledging (already implied by
	// Instruction), then revoke it. Done before AcquireLease if both.
	ReleaseLease bool
	// Wake: step again by then even if no input changes (zero: no timer
	// needed). A hint; stepping more often is harmless.
	Wake time.Time
}

// Step decides for one instant. It updates the core's memory (hysteresis)
// and returns what to do. See doc.go for the rules.
func (c *Core) Step(in Input) Output {
	now := in.Now
	if now.Before(c.mem.last) {
		now = c.mem.last
	}
	c.mem.last = now
	c.observe(now, in.Regions)
	d := decision{c: c, now: now, in: in}
	d.decide()
	return d.out
}

// observe updates the hysteresis memory from the statuses.
func (c *Core) observe(now time.Time, statuses []RegionStatus) {
	by := make(map[string]RegionStatus, len(statuses))
	for _, s := range statuses {
		by[s.Name] = s
	}
	for _, name := range c.cfg.Policy.Regions {
		st, ok := by[name]
		cond, detail := Down, "no status"
		if ok {
			cond, detail = st.Condition(), st.Detail
		}
		s := c.mem.regions[name]
		if s == nil {
			s = &seen{}
			c.mem.regions[name] = s
		}
		s.cond, s.detail = cond, detail
		if cond == Up {
			s.badSince = time.Time{}
			if s.upSince.IsZero() {
				s.upSince = now
			}
		} else {
			s.upSince = time.Time{}
			if s.badSince.IsZero() {
				s.badSince = now
			}
		}
	}
}

type decision struct {
	c   *Core
	now time.Time
	in  Input
	out Output
}

func (d *decision) policy() Policy { return d.c.cfg.Policy }
func (d *decision) local() string  { return d.c.cfg.Region }
func (d *decision) region(name string) *seen {
	if s := d.c.mem.regions[name]; s != nil {
		return s
	}
	return &seen{cond: Down, detail: "not in the policy"}
}

func (d *decision) retry(format string, args ...any) {
	d.out.Instruction = Instruction{Kind: RetryLater, Reason: fmt.Sprintf(format, args...)}
}

// wake records a time at which the decision may change by itself.
func (d *decision) wake(t time.Time) {
	if t.After(d.now) && (d.out.Wake.IsZero() || t.Before(d.out.Wake)) {
		d.out.Wake = t
	}
}

// elapsed reports whether at least dur has passed since t (a zero t never).
func (d *decision) elapsed(t time.Time, dur time.Duration) bool {
	if t.IsZero() {
		return false
	}
	d.wake(t.Add(dur))
	return !d.now.Before(t.Add(dur))
}

// firstUp returns the first region in preference order that is up and not
// except, or "".
func (d *decision) firstUp(except string) string {
	for _, r := range d.policy().Regions {
		if r != except && d.region(r).cond == Up {
			return r
		}
	}
	return ""
}

func (d *decision) decide() {
	p, in, mem := d.policy(), d.in, &d.c.mem
	if p.Mode == ActiveActive {
		d.out.Instruction = Instruction{Kind: Serve, Reason: "active-active: every region serves"}
		if in.Command != nil {
			d.out.Refused = fmt.Errorf("%w: namespace is active-active: every region serves, there is no active region to move", ErrRefused)
		}
		return
	}
	if !in.Committed.Read {
		d.retry("global store not read yet: standby until it is")
		d.refuse("the global store has not been read yet")
		return
	}
	rec := in.Committed.Record
	if rec.Epoch < mem.epoch {
		d.retry("stale read: epoch %d after %d", rec.Epoch, mem.epoch)
		d.refuse("stale read of the global store")
		return
	}
	if rec.Epoch != mem.epoch {
		mem.epoch, mem.epochSeenAt, mem.leaseMissingSince = rec.Epoch, d.now, time.Time{}
	}
	if in.Lease.Held() && (in.Lease.Epoch != rec.Epoch || rec.Active != d.local()) {
		d.out.ReleaseLease = true
	}
	if rec.Epoch == 0 {
		d.initial()
		return
	}
	if in.Committed.Lease == (StoreLease{Holder: rec.Active, Epoch: rec.Epoch}) {
		mem.leaseMissingSince = time.Time{}
	} else if mem.leaseMissingSince.IsZero() {
		mem.leaseMissingSince = d.now
	}
	if rec.Active == d.local() {
		d.active(rec)
	} else {
		d.standby(rec)
	}
	if in.Command != nil {
		d.manual(rec, *in.Command)
	}
}

func (d *decision) refuse(why string) {
	if d.in.Command != nil {
		d.out.Refused = fmt.Errorf("%w: --to %s: %s", ErrRefused, d.in.Command.To, why)
	}
}

// initial: no record yet. Every region proposes the first region that is
// up (a later one only after the earlier ones were not up for
// FailoverDelay); the CAS from epoch 0 lets one win.
func (d *decision) initial() {
	d.retry("namespace has no active region yet")
	if cmd := d.in.Command; cmd != nil {
		d.manual(Record{}, *cmd)
		return
	}
	to := d.firstUp("")
	if to == "" {
		d.out.Instruction.Reason += "; no region is up"
		return
	}
	// A region that is not the first choice is proposed only once every
	// region preferred to it has been seen not up for FailoverDelay, as a
	// failover would: at a deployment's start, a region whose members have
	// not all joined gossip yet is not passed over.
	for _, r := range d.policy().Regions {
		if r == to {
			break
		}
		if !d.elapsed(d.region(r).badSince, d.policy().FailoverDelay) {
			d.out.Instruction.Reason += fmt.Sprintf("; %s is preferred and not up for %s yet", r, d.policy().FailoverDelay)
			return
		}
	}
	d.out.Proposal = &Proposal{Kind: Initial, From: 0, NewEpoch: 1, NewActive: to, Reason: fmt.Sprintf("first region up in %s", strings.Join(d.policy().Regions, ","))}
}

// active: the local region is the record's active region.
func (d *decision) active(rec Record) {
	p, in := d.policy(), d.in
	switch {
	case in.Lease.Epoch != rec.Epoch:
		d.out.AcquireLease = true
		d.retry("acquiring the lease for epoch %d", rec.Epoch)
	case !MayAcknowledge(d.now, in.Lease.RenewedAt, in.Lease.TTL, d.c.cfg.Lease):
		d.retry("lease for epoch %d not renewed since %s: fenced until it is", rec.Epoch, in.Lease.RenewedAt.Format("15:04:05.000"))
	case rec.CatchUp && p.CatchUpRequired && !d.caughtUp(d.local()) && !d.prevDown(rec):
		d.retry("catching up from %s before serving epoch %d", rec.Previous, rec.Epoch)
	default:
		d.out.Instruction = Instruction{Kind: Serve, Reason: fmt.Sprintf("active in epoch %d", rec.Epoch)}
		d.wake(LeaseDeadline(in.Lease.RenewedAt, in.Lease.TTL, d.c.cfg.Lease))
	}
	if in.Command != nil {
		return
	}
	me := d.region(d.local())
	settled := func(dur time.Duration) bool { return d.elapsed(d.c.mem.epochSeenAt, dur) }
	// The policy no longer lists the local region: hand over at once.
	if p.rank(d.local()) < 0 {
		if to := d.firstUp(d.local()); to != "" {
			d.propose(Handover, rec, to, false, fmt.Sprintf("%s is not in the policy's regions", d.local()))
		}
		return
	}
	// Handover: the active region itself is down (e.g. its write probe
	// fails while its brokers still renew the lease).
	if me.cond == Down && d.elapsed(me.badSince, p.FailoverDelay) && settled(p.FailoverDelay) {
		if to := d.firstUp(d.local()); to != "" {
			d.propose(Handover, rec, to, false, fmt.Sprintf("%s (local) not up for %s, down (%s)", d.local(), d.now.Sub(me.badSince), me.detail))
			return
		}
	}
	// Switch-back to a more preferred region.
	if p.SwitchBackDelay == 0 || !settled(p.SwitchBackDelay) {
		return
	}
	for _, r := range p.Regions[:max(p.rank(d.local()), 0)] {
		s := d.region(r)
		if s.cond != Up || !d.elapsed(s.upSince, p.SwitchBackDelay) {
			continue
		}
		if p.CatchUpRequired && !d.caughtUp(r) {
			continue
		}
		d.propose(SwitchBack, rec, r, p.CatchUpRequired, fmt.Sprintf("%s up for %s", r, p.SwitchBackDelay))
		return
	}
}

// standby: another region is active.
func (d *decision) standby(rec Record) {
	p, in, mem := d.policy(), d.in, &d.c.mem
	a := d.region(rec.Active)
	leaseLive := in.Committed.Lease == (StoreLease{Holder: rec.Active, Epoch: rec.Epoch})

	// The instruction.
	switch {
	case a.cond == Up:
		d.out.Instruction = Instruction{Kind: Redirect, To: rec.Active, Reason: fmt.Sprintf("%s is active in epoch %d", rec.Active, rec.Epoch)}
	case p.LookupHold > 0 && d.now.Before(a.badSince.Add(p.LookupHold)):
		d.out.Instruction = Instruction{Kind: Hold, Until: a.badSince.Add(p.LookupHold), Reason: fmt.Sprintf("active %s is %s", rec.Active, a.cond)}
		d.wake(a.badSince.Add(p.LookupHold))
	case a.cond == Suspect || leaseLive:
		d.out.Instruction = Instruction{Kind: Redirect, To: rec.Active, Reason: fmt.Sprintf("%s is active in epoch %d (%s, lease live=%t)", rec.Active, rec.Epoch, a.cond, leaseLive)}
	default:
		d.retry("active %s is down, no live lease: failover pending", rec.Active)
	}

	// Failover.
	if in.Command != nil || leaseLive {
		return
	}
	gossipDown := a.cond == Down && d.elapsed(a.badSince, p.FailoverDelay) || p.rank(rec.Active) < 0
	leaseGone := d.elapsed(mem.leaseMissingSince, p.FailoverDelay+d.c.cfg.Lease.TTL)
	if !(gossipDown || leaseGone) || !d.elapsed(mem.epochSeenAt, p.FailoverDelay) {
		return
	}
	to := d.firstUp(rec.Active)
	if to == "" {
		d.retry("active %s is down and no other region is up", rec.Active)
		return
	}
	why := fmt.Sprintf("%s not up for %s, down (%s), no live lease", rec.Active, d.now.Sub(a.badSince), a.detail)
	switch {
	case p.rank(rec.Active) < 0:
		why = fmt.Sprintf("%s is not in the policy's regions, no live lease", rec.Active)
	case !gossipDown:
		why = fmt.Sprintf("no live lease of %s for %s", rec.Active, p.FailoverDelay+d.c.cfg.Lease.TTL)
	}
	d.propose(Failover, rec, to, false, why)
}

// manual decides on `failover --to`.
func (d *decision) manual(rec Record, cmd Command) {
	p := d.policy()
	switch {
	case p.rank(cmd.To) < 0:
		d.refuse(fmt.Sprintf("%s is not in the policy's regions %s", cmd.To, strings.Join(p.Regions, ",")))
	case rec.Epoch != 0 && cmd.To == rec.Active:
		d.refuse(fmt.Sprintf("%s is already active in epoch %d", cmd.To, rec.Epoch))
	case d.region(cmd.To).cond != Up:
		s := d.region(cmd.To)
		why := fmt.Sprintf("%s is %s", cmd.To, s.cond)
		if s.detail != "" {
			why += ": " + s.detail
		}
		d.refuse(why)
	default:
		catchUp := p.CatchUpRequired && rec.Epoch != 0 && d.region(rec.Active).cond == Up
		d.propose(Manual, rec, cmd.To, catchUp, "admin failover --to "+cmd.To)
	}
}

func (d *decision) propose(kind ProposalKind, rec Record, to string, catchUp bool, why string) {
	d.out.Proposal = &Proposal{Kind: kind, From: rec.Epoch, NewEpoch: rec.Epoch + 1, NewActive: to, Previous: rec.Active, CatchUp: catchUp, Reason: why}
}

func (d *decision) caughtUp(region string) bool {
	for _, s := range d.in.Regions {
		if s.Name == region {
			return s.ReplicationCaughtUp
		}
	}
	return false
}

// prevDown: the region a planned move came from is seen down for
// FailoverDelay, so waiting to catch up from it is pointless.
func (d *decision) prevDown(rec Record) bool {
	if rec.Previous == "" {
		return true
	}
	s := d.region(rec.Previous)
	return s.cond == Down && d.elapsed(s.badSince, d.policy().FailoverDelay)
}

// String prints the output as the datadriven tests show it.
func (o Output) String() string {
	var sb strings.Builder
	i := o.Instruction
	fmt.Fprintf(&sb, "%s", i.Kind)
	if i.To != "" {
		fmt.Fprintf(&sb, " to=%s", i.To)
	}
	if !i.Until.IsZero() {
		fmt.Fprintf(&sb, " until=%s", i.Until.Format("15:04:05.000"))
	}
	fmt.Fprintf(&sb, ": %s\n", i.Reason)
	if p := o.Proposal; p != nil {
		fmt.Fprintf(&sb, "propose %s: epoch %d -> %d, active=%s", p.Kind, p.From, p.NewEpoch, p.NewActive)
		if p.CatchUp {
			sb.WriteString(" catch-up")
		}
		fmt.Fprintf(&sb, " (%s)\n", p.Reason)
	}
	if o.Refused != nil {
		fmt.Fprintf(&sb, "refused: %v\n", o.Refused)
	}
	if o.ReleaseLease {
		sb.WriteString("release lease\n")
	}
	if o.AcquireLease {
		sb.WriteString("acquire lease\n")
	}
	return sb.String()
}
