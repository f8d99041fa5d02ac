package bookie

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// defaultConfigYAML is the printed DefaultConfig. The defaults are
// documented on the Config fields; this golden text is the source of truth
// for what they are (a field comment that drifts from it is a bug). Update it
// only when you mean to change a default.
const defaultConfigYAML = `id: ""
region: ""
rack: ""
listen_addr: 127.0.0.1:3181
advertise_addr: ""
metrics_addr: ""
data_dir: ""
disk_usage_threshold: 0.95
disk_check_interval: 1s
group_commit_max_delay: 0s
group_commit_max_bytes: 4194304
max_entry_bytes: 5308416
mem_table_size_bytes: 67108864
gc_interval: 15m0s
compaction_threshold: 0.2
max_inflight_per_stream: 1024
shutdown_timeout: 5s
`

func TestDefaultConfigGolden(t *testing.T) {
	got, err := yaml.Marshal(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != defaultConfigYAML {
		t.Fatalf("default config changed:\n%s\nwant:\n%s", got, defaultConfigYAML)
	}
	var back Config
	if err := yaml.Unmarshal([]byte(defaultConfigYAML), &back); err != nil {
		t.Fatal(err)
	}
	if back.DiskCheckInterval != DefaultDiskCheckInterval || back.GroupCommitMaxBytes != DefaultGroupCommitMaxBytes {
		t.Fatalf("yaml round trip: %+v", back)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.DataDir = "/tmp/x"
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.DataDir = "" }, "data_dir is required"},
		{func(c *Config) { c.DiskUsageThreshold = 1.5 }, "disk_usage_threshold 1.5 must be in (0, 1]"},
		{func(c *Config) { c.ListenAddr = "nope" }, "listen_addr \"nope\" is not host:port"},
		{func(c *Config) { c.ListenAddr = "127.0.0.1:0" }, "id is required"},
		{func(c *Config) { c.MemTableSizeBytes = 1000 }, "below 1 MiB"},
		{func(c *Config) { c.GroupCommitMaxDelay = -1 }, "group_commit_max_delay"},
		{func(c *Config) { c.MetricsAddr = "x" }, "metrics_addr"},
	} {
		c := ok
		tc.mut(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
	c := ok
	c.ListenAddr = "127.0.0.1:0"
	c.ID = "b1"
	if err := c.Validate(); err != nil {
		t.Fatalf("port 0 with an explicit id: %v", err)
	}
}
