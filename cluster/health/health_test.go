package health

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/proto/metapb"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func rec(name, region string, role Role, st MemberState, extra ...string) MemberRecord {
	tags := map[string]string{TagRegion: region, TagRole: string(role), TagRack: "r1", TagAddr: name + ":6650"}
	for i := 0; i+1 < len(extra); i += 2 {
		tags[extra[i]] = extra[i+1]
	}
	return MemberRecord{Name: name, GossipAddr: "127.0.0.1:7946", Tags: tags, State: st}
}

func probeTags(ok bool, when time.Time) []string {
	var out []string
	for k, v := range ProbeTags(ok, when) {
		out = append(out, k, v)
	}
	return out
}

// Since is when this process saw a member enter its current state: kept
// across rebuilds while the state holds (tag changes included), reset on
// every transition, and a reaped member disappears.
func TestBuildHealthViewTracksTransitions(t *testing.T) {
	type want struct {
		state MemberState
		since time.Duration
	}
	steps := []struct {
		now  time.Duration
		recs []MemberRecord
		want map[string]want // absent = not in the view
	}{
		{0, []MemberRecord{rec("a", "east", RoleBroker, MemberAlive), rec("b", "east", RoleBookie, MemberAlive)},
			map[string]want{"a": {MemberAlive, 0}, "b": {MemberAlive, 0}}},
		// a's tags change: still alive since 0. b is suspected.
		{time.Second, []MemberRecord{rec("a", "east", RoleBroker, MemberAlive, "x", "1"), rec("b", "east", RoleBookie, MemberSuspect)},
			map[string]want{"a": {MemberAlive, 0}, "b": {MemberSuspect, time.Second}}},
		// b still suspect: since unchanged. c joins.
		{2 * time.Second, []MemberRecord{rec("a", "east", RoleBroker, MemberAlive), rec("b", "east", RoleBookie, MemberSuspect), rec("c", "west", RoleBroker, MemberAlive)},
			map[string]want{"a": {MemberAlive, 0}, "b": {MemberSuspect, time.Second}, "c": {MemberAlive, 2 * time.Second}}},
		{3 * time.Second, []MemberRecord{rec("a", "east", RoleBroker, MemberAlive), rec("b", "east", RoleBookie, MemberFailed), rec("c", "west", RoleBroker, MemberLeft)},
			map[string]want{"a": {MemberAlive, 0}, "b": {MemberFailed, 3 * time.Second}, "c": {MemberLeft, 3 * time.Second}}},
		// b comes back (restart, or a healed partition).
		{4 * time.Second, []MemberRecord{rec("a", "east", RoleBroker, MemberAlive), rec("b", "east", RoleBookie, MemberAlive), rec("c", "west", RoleBroker, MemberLeft)},
			map[string]want{"a": {MemberAlive, 0}, "b": {MemberAlive, 4 * time.Second}, "c": {MemberLeft, 3 * time.Second}}},
		// c reaped.
		{5 * time.Second, []MemberRecord{rec("b", "east", RoleBookie, MemberAlive), rec("a", "east", RoleBroker, MemberAlive)},
			map[string]want{"a": {MemberAlive, 0}, "b": {MemberAlive, 4 * time.Second}}},
	}
	var v View
	for i, s := range steps {
		v = Build(v, s.recs, at(s.now), DefaultRules())
		if !v.AsOf().Equal(at(s.now)) {
			t.Fatalf("step %d: AsOf %v", i, v.AsOf())
		}
		var names []string
		for _, m := range v.Members() {
			names = append(names, m.Name)
			w, ok := s.want[m.Name]
			if !ok {
				t.Fatalf("step %d: unexpected member %s", i, m.Name)
			}
			if m.State != w.state || !m.Since.Equal(at(w.since)) {
				t.Errorf("step %d: %s is %s since %s, want %s since %s", i, m.Name, m.State, m.Since.Sub(t0), w.state, w.since)
			}
		}
		if len(names) != len(s.want) || !slices.IsSorted(names) {
			t.Errorf("step %d: members %v, want %d sorted", i, names, len(s.want))
		}
	}
}

func TestBuildHealthViewParsesTags(t *testing.T) {
	probeAt := at(-time.Second)
	v := Build(View{}, []MemberRecord{
		rec("east-bookie-1", "east", RoleBookie, MemberAlive, append(probeTags(true, probeAt), TagAdmin, "h:8080")...),
		{Name: ""}, // ignored
		rec("east-bookie-1", "west", RoleBroker, MemberFailed), // duplicate name: first wins
	}, t0, DefaultRules())
	m, ok := v.Member("east-bookie-1")
	if !ok || len(v.Members()) != 1 {
		t.Fatalf("members %v", v.Members())
	}
	if m.Region != "east" || m.Rack != "r1" || m.Role != RoleBookie || m.Addr != "east-bookie-1:6650" ||
		m.GossipAddr != "127.0.0.1:7946" || m.Tag(TagAdmin) != "h:8080" || m.State != MemberAlive {
		t.Errorf("member %+v", m)
	}
	if want := (ProbeResult{OK: true, At: time.UnixMilli(probeAt.UnixMilli()), By: "east-bookie-1"}); m.Probe != want {
		t.Errorf("probe %+v, want %+v", m.Probe, want)
	}
	for _, bad := range []map[string]string{
		{TagProbe: "ok"}, {TagProbe: "maybe", TagProbeAt: "1"}, {TagProbe: "fail", TagProbeAt: "x"}, {TagProbe: "ok", TagProbeAt: "-5"},
	} {
		if p := parseProbe("n", bad); p.Known() {
			t.Errorf("parseProbe(%v) = %+v, want unknown", bad, p)
		}
	}
}

// A view cannot be changed through what it returns, nor through the records
// it was built from.
func TestHealthViewIsImmutable(t *testing.T) {
	r := rec("a", "east", RoleBroker, MemberAlive)
	v := Build(View{}, []MemberRecord{r}, t0, DefaultRules())
	r.Tags[TagRegion] = "mutated"
	ms := v.Members()
	ms[0].Name = "mutated"
	ms[0].Tags()[TagRole] = "mutated"
	v.Region("east").Alive("")[0].State = MemberFailed
	m, _ := v.Member("a")
	if m.Region != "east" || m.Tag(TagRegion) != "east" || m.Tag(TagRole) != "broker" || m.State != MemberAlive {
		t.Fatalf("view changed: %+v tags %v", m, m.Tags())
	}
	later := v.At(at(time.Hour))
	if !v.AsOf().Equal(t0) || !later.AsOf().Equal(at(time.Hour)) {
		t.Fatalf("At changed the original: %v %v", v.AsOf(), later.AsOf())
	}
}

func TestRegionHealthQueries(t *testing.T) {
	v := Build(View{}, []MemberRecord{
		rec("e-br-1", "east", RoleBroker, MemberAlive),
		rec("e-br-2", "east", RoleBroker, MemberFailed),
		rec("e-bk-1", "east", RoleBookie, MemberAlive),
		rec("e-bk-2", "east", RoleBookie, MemberSuspect),
		rec("e-bk-3", "east", RoleBookie, MemberLeft),
		rec("w-br-1", "west", RoleBroker, MemberAlive),
		rec("witness", "third", RoleWitness, MemberAlive),
	}, t0, DefaultRules())
	names := func(ms []Member) string {
		var s []string
		for _, m := range ms {
			s = append(s, m.Name)
		}
		return strings.Join(s, ",")
	}
	if got := strings.Join(v.Regions(), ","); got != "east,third,west" {
		t.Errorf("regions %s", got)
	}
	e := v.Region("east")
	for _, c := range []struct{ got, want string }{
		{names(e.Alive(RoleBroker)), "e-br-1"},
		{names(e.Failed(RoleBroker)), "e-br-2"},
		{names(e.Alive(RoleBookie)), "e-bk-1"},
		{names(e.Suspect(RoleBookie)), "e-bk-2"},
		{names(e.Left(RoleBookie)), "e-bk-3"},
		{names(e.Alive("")), "e-bk-1,e-br-1"},
		{names(e.Members(RoleBookie)), "e-bk-1,e-bk-2,e-bk-3"},
		{names(v.Region("nowhere").Members("")), ""},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if e.Name() != "east" || e.Count(RoleBookie, MemberSuspect) != 1 {
		t.Errorf("name %q count %d", e.Name(), e.Count(RoleBookie, MemberSuspect))
	}
	if !v.IsFailed("e-br-2") || v.IsFailed("e-bk-2") || v.IsFailed("e-bk-3") || v.IsFailed("unknown") {
		t.Error("IsFailed: want true only for e-br-2")
	}
}

// The rule of Region.Healthy, case by case.
func TestRegionHealthy(t *testing.T) {
	rules := Rules{MinAliveBrokers: 1, MinAliveBookies: 2, ProbeFailWindow: 10 * time.Second}
	base := []MemberRecord{
		rec("br-1", "r", RoleBroker, MemberAlive),
		rec("bk-1", "r", RoleBookie, MemberAlive),
		rec("bk-2", "r", RoleBookie, MemberAlive),
	}
	with := func(extra ...MemberRecord) []MemberRecord { return append(slices.Clone(base), extra...) }
	cases := []struct {
		name  string
		recs  []MemberRecord
		rules Rules
		want  []string // problems
	}{
		{"all alive", base, rules, nil},
		{"no members", nil, rules, []string{"0 alive brokers, need 1", "0 alive bookies, need 2"}},
		{"broker suspect does not count", []MemberRecord{
			rec("br-1", "r", RoleBroker, MemberSuspect), base[1], base[2]}, rules, []string{"0 alive brokers, need 1"}},
		{"broker failed, another alive", with(rec("br-2", "r", RoleBroker, MemberFailed)), rules, nil},
		{"a bookie failed, too few left", []MemberRecord{
			base[0], base[1], rec("bk-2", "r", RoleBookie, MemberFailed)}, rules, []string{"1 alive bookies, need 2"}},
		{"a bookie left", []MemberRecord{
			base[0], base[1], rec("bk-2", "r", RoleBookie, MemberLeft)}, rules, []string{"1 alive bookies, need 2"}},
		{"witness region under zero rules", []MemberRecord{rec("w", "r", RoleWitness, MemberAlive)},
			Rules{}, nil},
		{"fresh failed probe", with(rec("br-2", "r", RoleBroker, MemberAlive, probeTags(false, at(-3*time.Second))...)),
			rules, []string{"write probe by br-2 failed 3s ago"}},
		{"failed probe at the window's edge", with(rec("br-2", "r", RoleBroker, MemberAlive, probeTags(false, at(-10*time.Second))...)),
			rules, []string{"write probe by br-2 failed 10s ago"}},
		{"failed probe older than the window", with(rec("br-2", "r", RoleBroker, MemberAlive, probeTags(false, at(-11*time.Second))...)),
			rules, nil},
		{"newer ok probe supersedes a failure", with(
			rec("br-2", "r", RoleBroker, MemberAlive, probeTags(false, at(-3*time.Second))...),
			rec("br-3", "r", RoleBroker, MemberAlive, probeTags(true, at(-2*time.Second))...)),
			rules, nil},
		{"newer failure supersedes an ok", with(
			rec("br-2", "r", RoleBroker, MemberAlive, probeTags(true, at(-3*time.Second))...),
			rec("br-3", "r", RoleBroker, MemberSuspect, probeTags(false, at(-2*time.Second))...)),
			rules, []string{"write probe by br-3 failed 2s ago"}},
		{"failed member's stale probe ignored", with(rec("br-2", "r", RoleBroker, MemberFailed, probeTags(false, at(-time.Second))...)),
			rules, nil},
		{"window 0 ignores probes", with(rec("br-2", "r", RoleBroker, MemberAlive, probeTags(false, t0)...)),
			Rules{MinAliveBrokers: 1, MinAliveBookies: 2}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rh := Build(View{}, c.recs, t0, c.rules).Region("r")
			if got := rh.Problems(); !slices.Equal(got, c.want) {
				t.Fatalf("problems %q, want %q", got, c.want)
			}
			if rh.Healthy() != (len(c.want) == 0) {
				t.Fatalf("Healthy() = %v", rh.Healthy())
			}
		})
	}
	// The same view judged later: the failure ages out of the window.
	v := Build(View{}, with(rec("br-2", "r", RoleBroker, MemberAlive, probeTags(false, t0)...)), t0, rules)
	if v.Region("r").Healthy() || !v.At(at(11*time.Second)).Region("r").Healthy() {
		t.Fatal("a failed probe should count at t0 and not 11s later")
	}
}

// A bookie that gossip has failed (or that left) is not offered for new
// ensembles; one it does not know, or only suspects, is.
func TestExcludeFailedBookies(t *testing.T) {
	v := Build(View{}, []MemberRecord{
		rec("bk-alive", "r", RoleBookie, MemberAlive),
		rec("bk-suspect", "r", RoleBookie, MemberSuspect),
		rec("bk-failed", "r", RoleBookie, MemberFailed),
		rec("bk-left", "r", RoleBookie, MemberLeft),
		rec("not-a-bookie", "r", RoleBroker, MemberFailed),
	}, t0, DefaultRules())
	var regs []*metapb.BookieRegistration
	for _, id := range []string{"bk-alive", "bk-failed", "bk-suspect", "bk-unknown", "bk-left", "not-a-bookie"} {
		regs = append(regs, &metapb.BookieRegistration{Id: id})
	}
	orig := slices.Clone(regs)
	var got []string
	for _, r := range v.ExcludeFailedBookies(regs) {
		got = append(got, r.Id)
	}
	if want := []string{"bk-alive", "bk-suspect", "bk-unknown", "not-a-bookie"}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	if !slices.Equal(regs, orig) {
		t.Fatal("input slice modified")
	}
	if got := (View{}).ExcludeFailedBookies(regs); len(got) != len(regs) {
		t.Fatal("an empty view must exclude nothing")
	}
}

func TestSameMembers(t *testing.T) {
	recs := []MemberRecord{rec("a", "r", RoleBroker, MemberAlive)}
	v1 := Build(View{}, recs, t0, DefaultRules())
	v2 := Build(v1, recs, at(time.Second), DefaultRules())
	if !SameMembers(v1, v2) {
		t.Error("a rebuild with nothing changed must be the same")
	}
	for _, r := range []MemberRecord{
		rec("a", "r", RoleBroker, MemberSuspect),
		rec("a", "r", RoleBroker, MemberAlive, "x", "y"),
		rec("b", "r", RoleBroker, MemberAlive),
	} {
		if SameMembers(v1, Build(v1, []MemberRecord{r}, at(time.Second), DefaultRules())) {
			t.Errorf("%+v: change not noticed", r)
		}
	}
}

// A region is unreachable from here when it has members and none is alive;
// one alive member of any role keeps it reachable.
func TestUnreachableRegions(t *testing.T) {
	v := Build(View{}, []MemberRecord{
		rec("e-broker", "east", RoleBroker, MemberSuspect),
		rec("e-bookie", "east", RoleBookie, MemberFailed),
		rec("w-broker", "west", RoleBroker, MemberAlive),
		rec("w-bookie", "west", RoleBookie, MemberFailed),
		rec("n-broker", "north", RoleBroker, MemberLeft),
		rec("s-bookie", "south", RoleBookie, MemberAlive),
		rec("s-broker", "south", RoleBroker, MemberSuspect),
	}, t0, DefaultRules())
	if got, want := v.Unreachable(), []string{"east", "north"}; !slices.Equal(got, want) {
		t.Fatalf("unreachable %v, want %v", got, want)
	}
	if got := (View{}).Unreachable(); len(got) != 0 {
		t.Fatalf("an empty view lists %v", got)
	}
}
