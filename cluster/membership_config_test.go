package cluster

import (
	"strings"
	"testing"
	"time"
)

// The printed defaults are the documentation of record: the arithmetic in
// DefaultMembershipConfig's and FastLocalConfig's comments must match these
// lines. Change them only when you understand why they moved.
func TestMembershipConfigPrint(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  MembershipConfig
		want string
	}{
		{"default (memberlist LAN, serf reconnect/reap)", DefaultMembershipConfig(), `
probe-interval=1s probe-timeout=500ms indirect-checks=3
suspicion-mult=4 suspicion-max-timeout-mult=6 awareness-max-multiplier=8
gossip-interval=200ms gossip-nodes=3 retransmit-mult=4 gossip-to-the-dead=30s
push-pull-interval=30s tcp-timeout=10s
reconnect-interval=30s reconnect-timeout=24h0m0s tombstone-timeout=24h0m0s reap-interval=15s
broadcast-timeout=5s leave-propagate-delay=1s join-retry=1s..30s
suspicion n=4: 4s..24s  n=20: 5.204s..31.224s
failure-detection-bound n=4: 30.4s  n=20: 1m10.024s
health: min-alive-brokers=1 min-alive-bookies=3 probe-fail-window=30s
`},
		{"meridian (regions)", RegionsConfig(), `
probe-interval=500ms probe-timeout=300ms indirect-checks=3
suspicion-mult=3 suspicion-max-timeout-mult=2 awareness-max-multiplier=2
gossip-interval=100ms gossip-nodes=3 retransmit-mult=4 gossip-to-the-dead=30s
push-pull-interval=15s tcp-timeout=5s
reconnect-interval=10s reconnect-timeout=24h0m0s tombstone-timeout=24h0m0s reap-interval=15s
broadcast-timeout=5s leave-propagate-delay=1s join-retry=1s..30s
suspicion n=4: 1.5s..3s  n=20: 1.9515s..3.903s
failure-detection-bound n=4: 6.2s  n=20: 23.303s
health: min-alive-brokers=1 min-alive-bookies=3 probe-fail-window=30s
`},
		{"fast local", FastLocalConfig(), `
probe-interval=200ms probe-timeout=100ms indirect-checks=2
suspicion-mult=3 suspicion-max-timeout-mult=2 awareness-max-multiplier=2
gossip-interval=50ms gossip-nodes=3 retransmit-mult=4 gossip-to-the-dead=5s
push-pull-interval=5s tcp-timeout=1s
reconnect-interval=500ms reconnect-timeout=30s tombstone-timeout=30s reap-interval=500ms
broadcast-timeout=2s leave-propagate-delay=200ms join-retry=50ms..500ms
suspicion n=4: 600ms..1.2s  n=20: 780.6ms..1.5612s
failure-detection-bound n=4: 2.5s  n=20: 9.3612s
health: min-alive-brokers=1 min-alive-bookies=3 probe-fail-window=30s
`},
	} {
		if got := c.cfg.String(); got != strings.TrimPrefix(c.want, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}

// memberlist arms a suspicion at its max unless too few members can confirm
// it (n-2 < SuspicionMult-2), then at its min.
func TestSuspicionStart(t *testing.T) {
	c := DefaultMembershipConfig() // SuspicionMult 4: k = 2
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{2, 4 * time.Second}, {3, 4 * time.Second}, {4, 24 * time.Second}, {10, 24 * time.Second}} {
		if got := c.suspicionStart(tc.n); got != tc.want {
			t.Errorf("n=%d: %s, want %s", tc.n, got, tc.want)
		}
	}
	c.SuspicionMult = 2 // k = 0: never expects confirmations
	if got := c.suspicionStart(10); got != 2*time.Second {
		t.Errorf("k=0: %s, want 2s", got)
	}
	if FastLocalConfig().FailureDetectionBound(1) != 0 {
		t.Error("a lone member detects nothing")
	}
}

func TestMembershipConfigValidate(t *testing.T) {
	ok := func() MembershipConfig {
		c := FastLocalConfig()
		c.NodeName, c.Region, c.Role = "east-broker-1", "east", RoleBroker
		return c
	}
	if err := ok().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	key16 := make([]byte, 16)
	for _, c := range []struct {
		mod  func(*MembershipConfig)
		want string
	}{
		{func(c *MembershipConfig) { c.NodeName = "" }, "NodeName is required"},
		{func(c *MembershipConfig) { c.NodeName = "east_broker" }, `NodeName "east_broker": use 1-128 letters, digits, '-' and '.'`},
		{func(c *MembershipConfig) { c.NodeName = strings.Repeat("a", 129) }, "use 1-128 letters"},
		{func(c *MembershipConfig) { c.Region = "" }, "Region is required"},
		{func(c *MembershipConfig) { c.Role = "proxy" }, `Role "proxy": want one of broker, bookie, witness, etcd`},
		{func(c *MembershipConfig) { c.Tags = map[string]string{"role": "x"} }, `Tags["role"]: set it through the config field`},
		{func(c *MembershipConfig) { c.BindAddr = "localhost" }, `BindAddr "localhost" is not an IP address`},
		{func(c *MembershipConfig) { c.BindPort = 70000 }, "BindPort 70000 out of range"},
		{func(c *MembershipConfig) { c.AdvertiseAddr = "x" }, `AdvertiseAddr "x" is not an IP address`},
		{func(c *MembershipConfig) { c.Seeds = []string{"10.0.0.1"} }, `seed "10.0.0.1": want host:port`},
		{func(c *MembershipConfig) { c.Seeds = []string{"h:0"} }, `seed "h:0": bad port`},
		{func(c *MembershipConfig) { c.JoinRetryIntervalMax = time.Millisecond }, "want 0 < min <= max"},
		{func(c *MembershipConfig) { c.ProbeTimeout = c.ProbeInterval }, "ProbeTimeout 200ms must be > 0 and below ProbeInterval 200ms"},
		{func(c *MembershipConfig) { c.ProbeInterval = 0 }, "ProbeInterval must be > 0"},
		{func(c *MembershipConfig) { c.SuspicionMult = 1 }, "SuspicionMult 1 must be >= 2"},
		{func(c *MembershipConfig) { c.SuspicionMaxTimeoutMult = 0 }, "SuspicionMaxTimeoutMult 0 must be >= 1"},
		{func(c *MembershipConfig) { c.GossipNodes = 0 }, "GossipNodes 0 must be > 0"},
		{func(c *MembershipConfig) { c.PushPullInterval = 0 }, "PushPullInterval must be > 0"},
		{func(c *MembershipConfig) { c.ReconnectTimeout = 0 }, "ReconnectTimeout must be > 0"},
		{func(c *MembershipConfig) { c.TombstoneTimeout = 0 }, "TombstoneTimeout must be > 0"},
		{func(c *MembershipConfig) { c.SecretKey = []byte("short") }, "SecretKey: AES key is 5 bytes, want 16, 24 or 32"},
		{func(c *MembershipConfig) { c.SecretKey = key16; c.SecondaryKeys = [][]byte{{1}} }, "SecondaryKeys[0]: AES key is 1 bytes"},
		{func(c *MembershipConfig) { c.SecondaryKeys = [][]byte{key16} }, "SecondaryKeys without a SecretKey"},
		{func(c *MembershipConfig) { c.Health.MinAliveBookies = -1 }, "Health: MinAliveBrokers, MinAliveBookies and ProbeFailWindow must be >= 0"},
	} {
		cfg := ok()
		c.mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "cluster: membership config: ") {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}
