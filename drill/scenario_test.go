package drill

import (
	"strings"
	"testing"

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
