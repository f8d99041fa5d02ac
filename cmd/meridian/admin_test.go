package main

import (
	"reflect"
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
