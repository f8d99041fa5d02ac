package drill

import (
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/drill/check"
	"github.com/meridian-mq/meridian/scenarios"
)

// Every shipped drill parses and validates, and states expectations.
func TestShippedDrillsParse(t *testing.T) {
	names, err := scenarios.Names()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"region-outage-async", "region-outage-sync", "rack-loss"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("drill %s is not shipped (have %v)", want, names)
		}
	}
	for _, n := range names {
		b, err := scenarios.Files.ReadFile(n + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		s, err := Parse(b)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if s.Name != n {
			t.Errorf("%s.yaml names itself %q", n, s.Name)
		}
		if len(s.Expect) == 0 || len(s.Faults) == 0 {
			t.Errorf("%s: a drill needs faults and expectations", n)
		}
	}
}

func TestParseRejectsMistakes(t *testing.T) {
	base := `
name: x
namespaces: [{name: public/a}]
workload:
  duration: 10s
  producers: [{topic: persistent://public/a/t}]
  consumers: [{topic: persistent://public/a/t, subscription: s}]
`
	for _, tc := range []struct{ extra, want string }{
		{"faults: [{at: 1s, action: kill, target: \"region:north\"}]", "no region"},
		{"faults: [{at: 1s, action: explode, target: \"region:east\"}]", "action"},
		{"faults: [{at: 1s, action: kill, target: \"rack:east\"}]", "rack:REGION/RACK"},
		{"faults: [{at: 1s, after_messages: 10, action: kill, target: \"region:east\"}]", "not both"},
		{"faults: [{at: 1s, action: partition, target: \"regions:east\"}]", "regions:A|B,C"},
		{"fautls: []", "fautls"}, // a typo is not silently ignored
		{"expect: {lost: 0}\ntopology: {regions: [witness]}", "witness"},
	} {
		_, err := Parse([]byte(base + tc.extra))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error mentioning %q", tc.extra, err, tc.want)
		}
	}
	bad := strings.Replace(base, "persistent://public/a/t, subscription", "persistent://public/b/t, subscription", 1)
	if _, err := Parse([]byte(bad)); err == nil {
		t.Error("a consumer on a topic outside the drill's namespaces was accepted")
	}
	if s, err := Parse([]byte(base)); err != nil {
		t.Fatal(err)
	} else if s.Workload.Producers[0].Rate != 100 || s.Workload.Consumers[0].Type != "exclusive" || len(s.Namespaces[0].Regions) != 2 {
		t.Errorf("defaults not applied: %+v", s)
	}
}

// A drill's clients get the recommended timeouts unless the file asks for
// the client's own defaults, which then reach the client as zeros.
func TestClientSettingsDefaults(t *testing.T) {
	base := "name: x\ntopology: {regions: [east]}\nnamespaces: [{name: public/default}]\nworkload:\n  duration: 5s\n  %s\n  producers: [{topic: persistent://public/default/t}]\nfaults: [{at: 1s, action: kill, target: \"region:east\"}]\nexpect: {lost: \"== 0\"}\n"
	s, err := Parse([]byte(strings.Replace(base, "%s", "client: {}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Workload.Client; c.ConnectionTimeout != 2*time.Second || c.KeepAliveInterval != time.Second || c.OperationTimeout != 5*time.Second || c.SendTimeout != 60*time.Second {
		t.Errorf("recommended: %+v", c)
	}
	s, err = Parse([]byte(strings.Replace(base, "%s", "client: {defaults: true}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Workload.Client; c.ConnectionTimeout != 0 || c.KeepAliveInterval != 0 || c.OperationTimeout != 0 || c.SendTimeout != 30*time.Second {
		t.Errorf("client defaults: %+v, want zeros and the client's 30 s send timeout", c)
	}
}

// A producer or consumer line with topics: N stands for one client per
// topic, TOPIC-00 … TOPIC-(N-1), named NAME-00 …, the line's rate split
// evenly; each is judged as a line of its own.
func TestParseFansALineOutOverTopics(t *testing.T) {
	s, err := Parse([]byte(`
name: x
namespaces: [{name: public/a, replication: {mode: async, failover: active-standby, primary: east}}]
workload:
  duration: 10s
  producers:
    - {name: p, topic: persistent://public/a/t, topics: 100, rate: 1000, keys: 8}
    - {name: one, topic: persistent://public/a/single}
  consumers:
    - {name: ex, topic: persistent://public/a/t, topics: 100, subscription: ex}
    - {name: ks, topic: persistent://public/a/t, topics: 100, subscription: ks, type: key_shared, ack: out-of-order}
faults: [{at: 5s, action: switchover, namespace: public/a, to: west}]
expect: {lost: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	ps, cs := s.Workload.Producers, s.Workload.Consumers
	if len(ps) != 101 || len(cs) != 200 {
		t.Fatalf("%d producers, %d consumers; want 101 and 200", len(ps), len(cs))
	}
	if p := ps[7]; p.Name != "p-07" || p.Topic != "persistent://public/a/t-07" || p.Rate != 10 || p.Keys != 8 || p.Topics != 0 {
		t.Errorf("producer 8: %+v, want p-07 on t-07 at 10/s with 8 keys", p)
	}
	if p := ps[100]; p.Name != "one" || p.Topic != "persistent://public/a/single" || p.Rate != 100 {
		t.Errorf("the plain line: %+v", p)
	}
	if c := cs[199]; c.Name != "ks-99" || c.Topic != "persistent://public/a/t-99" || c.Subscription != "ks" || c.Type != "key_shared" || c.Ack != "out-of-order" {
		t.Errorf("last consumer: %+v", c)
	}
	if f := s.Faults[0]; f.Label() != "switchover public/a to west" {
		t.Errorf("switchover label %q", f.Label())
	}
	if got := fanName("t", 3, 10); got != "t-3" {
		t.Errorf("fanName(t, 3, 10) = %q, want t-3", got)
	}
}

func TestParseRejectsBadFanOutsAndSwitchovers(t *testing.T) {
	base := `
name: x
namespaces:
  - {name: public/a, replication: {mode: async, failover: active-standby, primary: east}}
  - {name: public/aa, replication: {mode: async, failover: active-active}}
  - {name: public/one, regions: [east], replication: {failover: active-standby}}
workload:
  duration: 10s
  producers: [%s]
  consumers: [{topic: persistent://public/a/t, subscription: s}]
expect: {lost: 0}
`
	for _, tc := range []struct{ producers, faults, want string }{
		{"{topic: persistent://public/a/t, topics: 3, rate: 10}", "", "multiple of 3"},
		{"{topic: persistent://public/a/t, topics: 3, rate: 2}", "", "multiple of 3"},
		{"{topic: persistent://public/a/t, topics: -1}", "", "topics -1"},
		{"{topic: persistent://public/a/t, topics: 1001}", "", "topics 1001"},
		{"{name: p, topic: persistent://public/a/t, topics: 2}, {name: p-1, topic: persistent://public/a/u}", "", `"p-1" used twice`},
		{"{topic: persistent://public/a/t}", "{at: 1s, action: switchover, namespace: public/b, to: west}", "not one of the drill's"},
		{"{topic: persistent://public/a/t}", "{at: 1s, action: switchover, namespace: public/aa, to: west}", "not active-standby"},
		{"{topic: persistent://public/a/t}", "{at: 1s, action: switchover, namespace: public/one, to: east}", "not active-standby"},
		{"{topic: persistent://public/a/t}", "{at: 1s, action: switchover, namespace: public/a, to: north}", `to "north"`},
		{"{topic: persistent://public/a/t}", "{at: 1s, action: switchover, namespace: public/a, to: west, target: \"region:east\"}", "no target"},
		{"{topic: persistent://public/a/t}", "{at: 1s, action: switchover, namespace: public/a, to: west, timeout: -1s}", "timeout"},
		{"{topic: persistent://public/a/t}", "{at: 1s, action: kill, target: \"region:east\", to: west}", "belong to a switchover"},
	} {
		y := strings.Replace(base, "%s", tc.producers, 1)
		if tc.faults != "" {
			y += "faults: [" + tc.faults + "]\n"
		}
		_, err := Parse([]byte(y))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: got %v, want an error mentioning %q", tc.producers, tc.faults, err, tc.want)
		}
	}
}

// A switchover with region: instead of namespace: is the region-wide form
// (`meridian admin failover --region R --to T --planned`): it parses with
// its own label, and its mistakes are refused.
func TestParseRegionWideSwitchover(t *testing.T) {
	base := `
name: x
namespaces:
  - {name: public/a, replication: {mode: async, failover: active-standby, primary: east}}
  - {name: public/b, replication: {mode: async, failover: active-standby, primary: east}}
  - {name: public/aa, replication: {mode: async, failover: active-active}}
workload:
  duration: 10s
  producers: [{topic: persistent://public/a/t}]
expect: {lost: 0}
faults: [%s]
`
	s, err := Parse([]byte(strings.Replace(base, "%s", "{at: 1s, action: switchover, region: east, to: west, timeout: 5s}, {at: 5s, action: switchover, region: west, to: east}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if f := s.Faults[0]; f.Region != "east" || f.To != "west" || f.Namespace != "" || f.Timeout != 5*time.Second {
		t.Errorf("region-wide switchover parsed as %+v", f)
	}
	if got := s.Faults[0].Label(); got != "switchover region east to west" {
		t.Errorf("label %q, want %q", got, "switchover region east to west")
	}
	if got := s.Faults[1].Label(); got != "switchover region west to east" {
		t.Errorf("label %q", got)
	}
	for _, tc := range []struct{ fault, want string }{
		{"{at: 1s, action: switchover, region: east, namespace: public/a, to: west}", "namespace or region, not both"},
		{"{at: 1s, action: switchover, to: west}", "namespace or region"},
		{"{at: 1s, action: switchover, region: north, to: west}", `region "north"`},
		{"{at: 1s, action: switchover, region: east, to: north}", `to "north"`},
		{"{at: 1s, action: switchover, region: east, to: east}", "the region itself"},
		{"{at: 1s, action: switchover, region: east}", `to ""`},
		{"{at: 1s, action: switchover, region: east, to: west, timeout: -2s}", "timeout"},
		{"{at: 1s, action: switchover, region: east, to: west, target: \"region:east\"}", "no target"},
		{"{at: 1s, action: kill, target: \"region:east\", region: east}", "belong to a switchover"},
	} {
		_, err := Parse([]byte(strings.Replace(base, "%s", tc.fault, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.fault, err, tc.want)
		}
	}
	// No active-standby namespace of the drill spans both regions: the
	// switchover would move nothing.
	one := strings.Replace(base, "- {name: public/b, replication: {mode: async, failover: active-standby, primary: east}}", "- {name: public/b, regions: [east], replication: {failover: active-standby}}", 1)
	one = strings.Replace(one, "- {name: public/a, replication: {mode: async, failover: active-standby, primary: east}}", "- {name: public/a, replication: {mode: async, failover: active-active}}", 1)
	if _, err := Parse([]byte(strings.Replace(one, "%s", "{at: 1s, action: switchover, region: east, to: west}", 1))); err == nil || !strings.Contains(err.Error(), "no active-standby namespace") {
		t.Errorf("a region-wide switchover with nothing to move: got %v", err)
	}
}

// A namespace's part in a region-wide switchover pauses only its own
// topics: its pause is their longest stall after that fault, not another
// namespace's.
func TestNamespacePause(t *testing.T) {
	c := check.CutResult{Topics: []check.TopicCut{
		{Topic: "persistent://public/a/t-0", Resume: []check.TopicResume{{ProduceSec: 0.2, ConsumeSec: 0.3}, {ProduceSec: 1.5, ConsumeSec: 1.7}}},
		{Topic: "persistent://public/a/t-1", Resume: []check.TopicResume{{ProduceSec: 0.1, ConsumeSec: 0.1}, {ProduceSec: 1.9, ConsumeSec: 1.2}}},
		{Topic: "persistent://public/ab/t-0", Resume: []check.TopicResume{{ProduceSec: 9, ConsumeSec: 9}, {ProduceSec: 9, ConsumeSec: 9}}},
	}}
	if p, q := namespacePause(c, "public/a", 1); p != 1.9 || q != 1.7 {
		t.Errorf("public/a after fault 2: pause %.1f / %.1f s, want 1.9 / 1.7", p, q)
	}
	if p, _ := namespacePause(c, "public/a", 0); p != 0.2 {
		t.Errorf("public/a after fault 1: %.1f, want 0.2", p)
	}
}
