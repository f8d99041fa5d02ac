package drill

import (
	"strings"
	"testing"
	"time"

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
