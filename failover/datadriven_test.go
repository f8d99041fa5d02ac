package failover

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the scripts in testdata/. Every region has its own
// Core (its own memory) and may have its own health view; the global store
// is one shared record and lease key. Commands:
//
//	policy mode=M regions=a,b,c [failover-delay=D] [switch-back=D|never] [lookup-hold=D] [catch-up=BOOL]
//	                      replaces the policy and forgets every core's memory
//	lease-rules [ttl=D] [margin=D] [drift=F]
//	state unread | empty | active=R epoch=N [previous=R] [catch-up] [lease=R@N|none]
//	                      sets what the store holds (lease= default: the active region at epoch N)
//	health [view=R] a=ok|slow|suspect|failed|probe-fail ...
//	                      sets regions' health in R's view (every view without view=)
//	lagging a,b | lagging none
//	                      which regions have not caught up on replication
//	hold-lease region=R epoch=N [ago=D]      R's shell holds a lease renewed D ago
//	drop-lease region=R                      R's shell holds no lease
//	advance-time D
//	decide region=R [to=T]                   steps R's core (to=: failover --to T)
//	commit region=R       CAS of R's last proposal against the store's epoch
//	expire-lease          the store's lease key disappears
//	acquire region=R      R creates the lease key if absent and R is active
//	serving               decides for every region (no memory kept) and
//	                      lists those told to serve (without stepping cores)
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	now      time.Time
	policy   Policy
	rules    LeaseRules
	store    Committed
	views    map[string]map[string]RegionStatus // observer -> region -> status
	shared   map[string]RegionStatus
	lagging  map[string]bool
	leases   map[string]LocalLease
	cores    map[string]*Core
	proposal map[string]*Proposal
}

func newHarness() *harness {
	return &harness{
		now: t0, policy: DefaultPolicy("east", "west"), rules: DefaultLeaseRules(),
		views: map[string]map[string]RegionStatus{}, shared: map[string]RegionStatus{},
		lagging: map[string]bool{}, leases: map[string]LocalLease{}, cores: map[string]*Core{},
		proposal: map[string]*Proposal{},
	}
}

func (h *harness) core(t *testing.T, region string) *Core {
	if c := h.cores[region]; c != nil {
		return c
	}
	c, err := NewCore(Config{Region: region, Policy: h.policy, Lease: h.rules})
	if err != nil {
		t.Fatal(err)
	}
	h.cores[region] = c
	return c
}

func (h *harness) statuses(observer string) []RegionStatus {
	var out []RegionStatus
	for _, r := range h.policy.Regions {
		s, ok := h.views[observer][r]
		if !ok {
			s, ok = h.shared[r]
		}
		if !ok {
			continue
		}
		s.ReplicationCaughtUp = !h.lagging[r]
		out = append(out, s)
	}
	return out
}

func statusFor(t *testing.T, d *datadriven.TestData, name, v string) RegionStatus {
	s := RegionStatus{Name: name, LastProbe: t0}
	switch v {
	case "ok":
		s.Healthy, s.ProbeOK = true, true
	case "slow": // memberlist misses its probes; write probes succeed
		s.Suspected, s.ProbeOK, s.Detail = true, true, "1 alive brokers, need 1 (others suspect)"
	case "suspect":
		s.Suspected, s.Detail = true, "0 alive brokers, need 1"
	case "failed":
		s.Detail = "0 alive brokers, need 1; 0 alive bookies, need 3"
	case "probe-fail":
		s.Detail = "write probe by b1 failed 1s ago"
	default:
		d.Fatalf(t, "unknown health %q", v)
	}
	return s
}

func (h *harness) dur(t *testing.T, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	a, ok := d.Arg(key)
	if !ok {
		return def
	}
	v := a.SingleVal(t)
	if v == "never" {
		return 0
	}
	x, err := time.ParseDuration(v)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return x
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "policy":
		var mode, regions string
		d.ScanArgs(t, "mode", &mode)
		d.ScanArgs(t, "regions", &regions)
		p := DefaultPolicy(strings.Split(regions, ",")...)
		p.Mode = Mode(mode)
		p.FailoverDelay = h.dur(t, d, "failover-delay", p.FailoverDelay)
		p.SwitchBackDelay = h.dur(t, d, "switch-back", p.SwitchBackDelay)
		p.LookupHold = h.dur(t, d, "lookup-hold", p.LookupHold)
		d.MaybeScanArgs(t, "catch-up", &p.CatchUpRequired)
		if err := p.Validate(); err != nil {
			if !errors.Is(err, ErrInvalidPolicy) {
				d.Fatalf(t, "not ErrInvalidPolicy: %v", err)
			}
			return "error: " + err.Error()
		}
		h.policy, h.cores = p, map[string]*Core{}
		return p.String()

	case "lease-rules":
		r := h.rules
		r.TTL = h.dur(t, d, "ttl", r.TTL)
		r.RenewEvery = r.TTL / 3
		r.Margin = h.dur(t, d, "margin", r.Margin)
		d.MaybeScanArgs(t, "drift", &r.MaxDriftRate)
		if err := r.Validate(); err != nil {
			return "error: " + err.Error()
		}
		h.rules, h.cores = r, map[string]*Core{}
		return fmt.Sprintf("ttl=%s safe=%s", r.TTL, SafeLeaseDuration(r.TTL, r))

	case "state":
		switch {
		case d.HasArg("unread"):
			h.store = Committed{}
		case d.HasArg("empty"):
			h.store = Committed{Read: true}
		default:
			var rec Record
			d.ScanArgs(t, "active", &rec.Active)
			d.ScanArgs(t, "epoch", &rec.Epoch)
			d.MaybeScanArgs(t, "previous", &rec.Previous)
			rec.CatchUp = d.HasArg("catch-up")
			lease := StoreLease{Holder: rec.Active, Epoch: rec.Epoch}
			if a, ok := d.Arg("lease"); ok {
				lease = parseStoreLease(t, d, a.SingleVal(t))
			}
			h.store = Committed{Read: true, Record: rec, Lease: lease}
		}
		return h.storeString()

	case "health":
		var observer string
		d.MaybeScanArgs(t, "view", &observer)
		for _, a := range d.CmdArgs {
			if a.Key == "view" {
				continue
			}
			s := statusFor(t, d, a.Key, a.SingleVal(t))
			if observer == "" {
				h.shared[a.Key] = s
				for _, v := range h.views {
					delete(v, a.Key)
				}
			} else {
				if h.views[observer] == nil {
					h.views[observer] = map[string]RegionStatus{}
				}
				h.views[observer][a.Key] = s
			}
		}
		return "ok"

	case "lagging":
		h.lagging = map[string]bool{}
		for _, a := range d.CmdArgs {
			for _, r := range strings.Split(a.Key, ",") {
				if r != "none" {
					h.lagging[r] = true
				}
			}
		}
		return "ok"

	case "hold-lease":
		var region string
		var epoch uint64
		d.ScanArgs(t, "region", &region)
		d.ScanArgs(t, "epoch", &epoch)
		ago := h.dur(t, d, "ago", 0)
		h.leases[region] = LocalLease{Epoch: epoch, RenewedAt: h.now.Add(-ago), TTL: h.rules.TTL}
		return fmt.Sprintf("%s holds lease epoch %d renewed %s ago", region, epoch, ago)

	case "drop-lease":
		var region string
		d.ScanArgs(t, "region", &region)
		delete(h.leases, region)
		return "ok"

	case "advance-time":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		h.now = h.now.Add(dur)
		return "t=" + h.now.Sub(t0).String()

	case "decide":
		var region string
		d.ScanArgs(t, "region", &region)
		in := h.input(region)
		if a, ok := d.Arg("to"); ok {
			in.Command = &Command{To: a.SingleVal(t)}
		}
		out := h.core(t, region).Step(in)
		h.check(t, d, region, in, out)
		h.proposal[region] = out.Proposal
		s := out.String()
		if !out.Wake.IsZero() {
			s += fmt.Sprintf("wake in %s\n", out.Wake.Sub(h.now))
		}
		return s

	case "commit":
		var region string
		d.ScanArgs(t, "region", &region)
		p := h.proposal[region]
		if p == nil {
			d.Fatalf(t, "%s has no proposal", region)
		}
		h.proposal[region] = nil
		if p.From != h.store.Record.Epoch {
			return fmt.Sprintf("cas lost: store has epoch %d, proposal was from %d", h.store.Record.Epoch, p.From)
		}
		h.store.Record = p.Record(h.now)
		return "committed: " + h.storeString()

	case "expire-lease":
		h.store.Lease = StoreLease{}
		return h.storeString()

	case "acquire":
		var region string
		d.ScanArgs(t, "region", &region)
		rec := h.store.Record
		if h.store.Lease != (StoreLease{}) || rec.Active != region {
			return fmt.Sprintf("acquire failed: %s", h.storeString())
		}
		h.store.Lease = StoreLease{Holder: region, Epoch: rec.Epoch}
		h.leases[region] = LocalLease{Epoch: rec.Epoch, RenewedAt: h.now, TTL: h.rules.TTL}
		return "acquired: " + h.storeString()

	case "serving":
		var names []string
		for _, r := range h.policy.Regions {
			c, _ := NewCore(Config{Region: r, Policy: h.policy, Lease: h.rules})
			if c.Step(h.input(r)).Instruction.Kind == Serve {
				names = append(names, r)
			}
		}
		if len(names) == 0 {
			return "none"
		}
		return strings.Join(names, ",")
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

func (h *harness) input(region string) Input {
	return Input{Now: h.now, Regions: h.statuses(region), Committed: h.store, Lease: h.leases[region]}
}

func (h *harness) storeString() string {
	if !h.store.Read {
		return "store unread"
	}
	l := "none"
	if h.store.Lease != (StoreLease{}) {
		l = fmt.Sprintf("%s@%d", h.store.Lease.Holder, h.store.Lease.Epoch)
	}
	return fmt.Sprintf("%s lease=%s", h.store.Record, l)
}

func parseStoreLease(t *testing.T, d *datadriven.TestData, v string) StoreLease {
	if v == "none" {
		return StoreLease{}
	}
	holder, e, ok := strings.Cut(v, "@")
	n, err := strconv.ParseUint(e, 10, 64)
	if !ok || err != nil {
		d.Fatalf(t, "lease=%s: want region@epoch or none", v)
	}
	return StoreLease{Holder: holder, Epoch: n}
}

// check holds every output to the invariants, so a rewrite of the files
// cannot bless a broken answer.
func (h *harness) check(t *testing.T, d *datadriven.TestData, region string, in Input, out Output) {
	if h.policy.Mode == ActiveActive {
		if out.Proposal != nil || out.AcquireLease || out.Instruction.Kind != Serve {
			d.Fatalf(t, "active-active must serve and propose nothing: %v", out)
		}
		return
	}
	if out.Instruction.Kind == Serve {
		rec := in.Committed.Record
		if rec.Active != region || in.Lease.Epoch != rec.Epoch || !MayAcknowledge(in.Now, in.Lease.RenewedAt, in.Lease.TTL, h.rules) {
			d.Fatalf(t, "%s told to serve without being active with a valid lease: %v", region, out)
		}
	}
	if p := out.Proposal; p != nil {
		if p.NewEpoch != p.From+1 || p.From != in.Committed.Record.Epoch || p.NewActive == in.Committed.Record.Active || !slices.Contains(h.policy.Regions, p.NewActive) {
			d.Fatalf(t, "bad proposal %+v on %v", *p, in.Committed.Record)
		}
	}
	if out.Refused != nil && !errors.Is(out.Refused, ErrRefused) {
		d.Fatalf(t, "refusal does not wrap ErrRefused: %v", out.Refused)
	}
}
