package replicator

import (
	"errors"
	"flag"
	"os"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// The defaults are stated once, in code, and checked here (a golden file
// rather than prose that drifts).
func TestDefaultSenderConfigGolden(t *testing.T) {
	got := DefaultSenderConfig("region-a", "region-b").String()
	const path = "testdata/default_sender_config.golden"
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("DefaultSenderConfig changed (go test -update to accept):\n%s\nwant:\n%s", got, want)
	}
	if err := DefaultSenderConfig("a", "b").Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSenderConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*SenderConfig){
		"no local":         func(c *SenderConfig) { c.Local = "" },
		"no remote":        func(c *SenderConfig) { c.Remote = "" },
		"remote is local":  func(c *SenderConfig) { c.Remote = c.Local },
		"batch entries":    func(c *SenderConfig) { c.BatchMaxEntries = 0 },
		"batch bytes":      func(c *SenderConfig) { c.BatchMaxBytes = 0 },
		"inflight batches": func(c *SenderConfig) { c.MaxInflightBatches = 0 },
		"inflight bytes":   func(c *SenderConfig) { c.MaxInflightBytes = 0 },
		"ack timeout":      func(c *SenderConfig) { c.AckTimeout = 0 },
		"backoff":          func(c *SenderConfig) { c.BackoffInitial = 0 },
		"backoff max":      func(c *SenderConfig) { c.BackoffMax = c.BackoffInitial - time.Millisecond },
		"quota":            func(c *SenderConfig) { c.Quota.MaxEntries = -1 },
		"policy":           func(c *SenderConfig) { c.QuotaPolicy = 9 },
	} {
		c := DefaultSenderConfig("a", "b")
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}
