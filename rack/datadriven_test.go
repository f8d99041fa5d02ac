package rack

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the cases in testdata/. Commands:
//
//	topology            input lines "region/rack: id id ..." ("rack: ..." for no region,
//	                    "-" for an empty label); sets the live bookies, remembers labels
//	kill id ...         removes bookies from the live list; their labels stay known
//	policy kind=K [min-racks=N] [enforce] [regions=(a,b)] [min-regions=N]
//	validate e= qw= qa=
//	place e= qw= qa= [seed=] [exclude=(ids)] [local=region/rack]
//	ensemble qw= qa=    input "id id ...": sets the current ensemble from known labels
//	replace idx= [seed=] [exclude=(ids)]   replaces in the current ensemble
//	check               grades the current ensemble
//	read-order [entry=] [region=] [rack=] [down=(ids)]   orders the entry's write set
//
// Every place and replace result is also checked here for the invariants
// (distinct, live, not excluded, Adherence == Check), so a rewrite cannot
// bless a broken answer silently.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.Contains(path, "fuzz") {
			t.Skip("fuzz corpus, not a datadriven file")
		}
		st := &ddState{labels: map[string]Bookie{}, policy: DefaultPolicy()}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return st.run(t, d)
		})
	})
}

type ddState struct {
	labels   map[string]Bookie
	live     []Bookie
	policy   Policy
	ensemble []Bookie
	qw, qa   int
}

func (st *ddState) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "topology":
		st.live = nil
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			loc, ids, ok := strings.Cut(line, ":")
			if !ok {
				d.Fatalf(t, "bad topology line %q", line)
			}
			region, rk, ok := strings.Cut(strings.TrimSpace(loc), "/")
			if !ok {
				region, rk = "", region
			}
			for _, id := range strings.Fields(ids) {
				b := Bookie{ID: id, Region: undash(region), Rack: undash(rk)}
				st.labels[id] = b
				st.live = append(st.live, b)
			}
		}
		return fmt.Sprintf("%d live bookies", len(st.live))

	case "kill":
		for _, a := range d.CmdArgs {
			n := len(st.live)
			st.live = deleteID(st.live, a.Key)
			if len(st.live) == n {
				d.Fatalf(t, "kill: %s not live", a.Key)
			}
		}
		return fmt.Sprintf("%d live bookies", len(st.live))

	case "policy":
		p := Policy{}
		var kind string
		d.ScanArgs(t, "kind", &kind)
		p.Kind = Kind(kind)
		d.MaybeScanArgs(t, "min-racks", &p.MinRacksPerWriteQuorum)
		d.MaybeScanArgs(t, "min-regions", &p.MinRegionsForDurability)
		p.Enforce = d.HasArg("enforce")
		if a, ok := d.Arg("regions"); ok {
			p.Regions = a.Vals
		}
		st.policy = p
		return p.String()

	case "validate":
		var e, qw, qa int
		d.ScanArgs(t, "e", &e)
		d.ScanArgs(t, "qw", &qw)
		d.ScanArgs(t, "qa", &qa)
		if err := st.policy.Validate(e, qw, qa); err != nil {
			if !errors.Is(err, ErrInvalidPolicy) {
				d.Fatalf(t, "Validate error does not wrap ErrInvalidPolicy: %v", err)
			}
			return "error: " + err.Error()
		}
		return "ok"

	case "place":
		req := Request{Exclude: st.exclude(d)}
		d.ScanArgs(t, "e", &req.E)
		d.ScanArgs(t, "qw", &req.Qw)
		d.ScanArgs(t, "qa", &req.Qa)
		if a, ok := d.Arg("local"); ok {
			req.LocalRegion, req.LocalRack, _ = strings.Cut(a.SingleVal(t), "/")
		}
		ens, adh, err := Place(st.live, st.policy, req, st.rng(t, d))
		if err != nil {
			return st.errString(t, d, err)
		}
		st.checkResult(t, d, ens, adh, req)
		st.ensemble, st.qw, st.qa = ens, req.Qw, req.Qa
		return st.printEnsemble(adh)

	case "ensemble":
		d.ScanArgs(t, "qw", &st.qw)
		d.ScanArgs(t, "qa", &st.qa)
		st.ensemble = nil
		for _, id := range strings.Fields(d.Input) {
			b, ok := st.labels[id]
			if !ok {
				d.Fatalf(t, "unknown bookie %s", id)
			}
			st.ensemble = append(st.ensemble, b)
		}
		return st.printEnsemble(Check(st.policy, st.ensemble, st.qw, st.qa))

	case "replace":
		var idx int
		d.ScanArgs(t, "idx", &idx)
		req := Request{Qw: st.qw, Qa: st.qa, Exclude: st.exclude(d)}
		b, adh, err := Replace(st.live, st.policy, req, st.ensemble, idx, st.rng(t, d))
		if err != nil {
			return st.errString(t, d, err)
		}
		if _, ok := findID(st.ensemble, b.ID); ok || req.Exclude[b.ID] {
			d.Fatalf(t, "replace chose %v: in the ensemble or excluded", b)
		}
		if _, ok := findID(st.live, b.ID); !ok {
			d.Fatalf(t, "replace chose %v: not live", b)
		}
		old := st.ensemble[idx]
		next := append([]Bookie(nil), st.ensemble...)
		next[idx] = b
		if c := Check(st.policy, next, st.qw, st.qa); c != adh {
			d.Fatalf(t, "replace returned %v, Check says %v", adh, c)
		}
		st.ensemble = next
		return fmt.Sprintf("replaced [%d] %v -> %v\n", idx, old, b) + st.printEnsemble(adh)

	case "check":
		return Check(st.policy, st.ensemble, st.qw, st.qa).String()

	case "read-order":
		entry := 0
		d.MaybeScanArgs(t, "entry", &entry)
		var region, rk string
		d.MaybeScanArgs(t, "region", &region)
		d.MaybeScanArgs(t, "rack", &rk)
		down := map[string]bool{}
		if a, ok := d.Arg("down"); ok {
			for _, id := range a.Vals {
				down[id] = true
			}
		}
		ws := writeSet(st.ensemble, entry%len(st.ensemble), st.qw)
		var sb strings.Builder
		for _, i := range ReadOrder(ws, region, rk, down) {
			fmt.Fprintf(&sb, "%v", ws[i])
			if down[ws[i].ID] {
				sb.WriteString(" (down)")
			}
			sb.WriteString("\n")
		}
		return sb.String()
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

func undash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

func deleteID(bs []Bookie, id string) []Bookie {
	var out []Bookie
	for _, b := range bs {
		if b.ID != id {
			out = append(out, b)
		}
	}
	return out
}

func findID(bs []Bookie, id string) (Bookie, bool) {
	for _, b := range bs {
		if b.ID == id {
			return b, true
		}
	}
	return Bookie{}, false
}

func (st *ddState) exclude(d *datadriven.TestData) map[string]bool {
	a, ok := d.Arg("exclude")
	if !ok {
		return nil
	}
	m := map[string]bool{}
	for _, id := range a.Vals {
		m[id] = true
	}
	return m
}

func (st *ddState) rng(t *testing.T, d *datadriven.TestData) *rand.Rand {
	seed := uint64(1)
	d.MaybeScanArgs(t, "seed", &seed)
	return rand.New(rand.NewPCG(seed, 0))
}

func (st *ddState) errString(t *testing.T, d *datadriven.TestData, err error) string {
	var pe *PlacementError
	switch {
	case errors.As(err, &pe) && errors.Is(err, ErrNotEnoughBookies):
	case errors.Is(err, ErrInvalidPolicy):
	default:
		d.Fatalf(t, "untyped error: %v", err)
	}
	return "error: " + err.Error()
}

func (st *ddState) checkResult(t *testing.T, d *datadriven.TestData, ens []Bookie, adh Adherence, req Request) {
	if len(ens) != req.E {
		d.Fatalf(t, "ensemble of %d, want %d", len(ens), req.E)
	}
	seen := map[string]bool{}
	for _, b := range ens {
		if seen[b.ID] || req.Exclude[b.ID] {
			d.Fatalf(t, "%v duplicated or excluded in %v", b, ens)
		}
		if _, ok := findID(st.live, b.ID); !ok {
			d.Fatalf(t, "%v not live", b)
		}
		seen[b.ID] = true
	}
	if c := Check(st.policy, ens, req.Qw, req.Qa); c != adh {
		d.Fatalf(t, "Place returned %v, Check says %v", adh, c)
	}
	if st.policy.Enforce && adh != AdherenceStrict {
		d.Fatalf(t, "enforced placement returned %v", adh)
	}
}

// printEnsemble prints the members and, for every write set, how many racks
// and regions it spans.
func (st *ddState) printEnsemble(adh Adherence) string {
	var sb strings.Builder
	for i, b := range st.ensemble {
		fmt.Fprintf(&sb, "[%d] %v\n", i, b)
	}
	fmt.Fprintf(&sb, "adherence: %v\n", adh)
	for s := range st.ensemble {
		ws := writeSet(st.ensemble, s, st.qw)
		racks, regions := map[rackKey]bool{}, map[string]bool{}
		var ids []string
		for _, b := range ws {
			racks[b.rackKey()] = true
			regions[b.Region] = true
			ids = append(ids, b.ID)
		}
		fmt.Fprintf(&sb, "write set %d {%s}: %d racks, %d regions\n", s, strings.Join(ids, ","), len(racks), len(regions))
	}
	return sb.String()
}
