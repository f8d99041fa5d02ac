package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The failover flags of `namespaces create|update` become the replication
// policy's fields: --switch-back-delay 0 is sent as an explicit 0 (never),
// and a flag not given is not sent at all.
func TestReplFlagsFailoverFields(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want map[string]any
	}{
		{[]string{"--failover-delay", "500ms", "--switch-back-delay", "0", "--orphans", "quarantine"},
			map[string]any{"failoverDelayMs": int64(500), "switchBackDelayMs": int64(0), "orphans": "quarantine"}},
		{[]string{"--switch-back-delay", "45s"}, map[string]any{"switchBackDelayMs": int64(45000)}},
		{[]string{"--primary", "west"}, map[string]any{"primary": "west"}},
	} {
		var f replFlags
		c := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		f.register(c)
		if err := c.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		u, err := f.update(c)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := u.policy(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: fields %v, want %v", tc.args, got, tc.want)
		}
	}
	var f replFlags
	c := &cobra.Command{Use: "x"}
	f.register(c)
	_ = c.ParseFlags([]string{"--switch-back-delay", "-1s"})
	if _, err := f.update(c); err == nil {
		t.Error("--switch-back-delay -1s accepted")
	}
}

// The RPO budget's flags become the policy's maxReplicationLag* fields;
// a negative or sub-millisecond budget is refused.
func TestReplFlagsRPOBudgetFields(t *testing.T) {
	var f replFlags
	c := &cobra.Command{Use: "x"}
	f.register(c)
	if err := c.ParseFlags([]string{"--max-replication-lag", "2s", "--max-replication-lag-bytes", "64MiB", "--max-replication-lag-action", "refuse"}); err != nil {
		t.Fatal(err)
	}
	u, err := f.update(c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"maxReplicationLagMs": int64(2000), "maxReplicationLagBytes": int64(64 << 20), "maxReplicationLagAction": "refuse"}
	if got := u.policy(); !reflect.DeepEqual(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	for _, bad := range []string{"-1s", "10us"} {
		var f replFlags
		c := &cobra.Command{Use: "x"}
		f.register(c)
		_ = c.ParseFlags([]string{"--max-replication-lag", bad})
		if _, err := f.update(c); err == nil {
			t.Errorf("--max-replication-lag %s accepted", bad)
		}
	}
}

// The rpo table shows each (topic, remote) with the budget and states.
func TestPrintRPOTable(t *testing.T) {
	var rows []rpoRow
	if err := json.Unmarshal([]byte(`[{"topic":"persistent://t/ns/a","maxReplicationLagMs":2000,"action":"hold","gate":"hold","closedSeconds":3.2,
		"remotes":[{"remote":"west","state":"exceeded","atRiskSeconds":2.4,"atRiskEntries":480,"atRiskBytes":245760}]}]`), &rows); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printRPOTable(&b, rows)
	for _, want := range []string{"AT RISK", "persistent://t/ns/a", "west", "2.4s", "480", "245760", "2s", "hold", "exceeded", "3.2s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
