// Package drill runs disaster drills: a drill file (YAML, see scenarios/)
// names a topology, a workload of unmodified pulsar-client-go producers and
// consumers, a schedule of real faults and the expectations the run must
// meet. Run starts the topology as separate OS processes (tools/up),
// runs the workload while it applies the faults, heals, drains, and judges
// every acknowledged message against what the consumers received
// (drill/check), then writes report.json, report.md and timeline.svg.
package drill

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/clientopts"
	"gopkg.in/yaml.v3"
)

// Scenario is a drill file.
type Scenario struct {
	Name        string      `yaml:"name"`
	Description string      `yaml:"description"`
	Topology    Topology    `yaml:"topology"`
	Namespaces  []Namespace `yaml:"namespaces"`
	Workload    Workload    `yaml:"workload"`
	Faults      []FaultSpec `yaml:"faults"`
	// Drain bounds the wait, after the producers stop, for the consumers
	// to receive every acknowledged message. Default 60s.
	Drain time.Duration `yaml:"drain"`
	// Expect maps a figure to a bound, e.g. lost: "0", rto_produce:
	// "<= 10s", duplicates: "<= acks_in(300ms)" (drill/check).
	Expect map[string]string `yaml:"expect"`
}

// Topology is what `meridian up` starts.
type Topology struct {
	Regions []string `yaml:"regions"` // default east, west
	Racks   int      `yaml:"racks"`   // per region, default 3
	Bookies int      `yaml:"bookies"` // per region, default 3
	Brokers int      `yaml:"brokers"` // per region, default 1
	// GossipProfile: meridian (default), lan or fast.
	GossipProfile string `yaml:"gossip_profile"`
	// FailoverLeaseTTL, OwnershipTTL: broker settings ("" = default).
	FailoverLeaseTTL string `yaml:"failover_lease_ttl"`
	OwnershipTTL     string `yaml:"ownership_ttl"`
}

// Namespace is created before the workload starts.
type Namespace struct {
	Name    string   `yaml:"name"`    // tenant/namespace
	Regions []string `yaml:"regions"` // default: every region
	// Replication is the namespace's Meridian replication policy as the
	// admin API takes it (mode, failover, primary, failoverDelayMs,
	// switchBackDelayMs, orphans, ...).
	Replication map[string]any `yaml:"replication"`
	// Ensemble, WriteQuorum, AckQuorum: the namespace's persistence
	// (0: the broker's default).
	Ensemble    int `yaml:"ensemble"`
	WriteQuorum int `yaml:"write_quorum"`
	AckQuorum   int `yaml:"ack_quorum"`
}

// Workload is the drill's clients.
type Workload struct {
	Duration  time.Duration  `yaml:"duration"`
	Client    ClientSettings `yaml:"client"`
	Producers []ProducerSpec `yaml:"producers"`
	Consumers []ConsumerSpec `yaml:"consumers"`
}

// ClientSettings are the pulsar-client-go options every client gets. A
// setting left out takes the value Meridian recommends
// (internal/clientopts: connection timeout 2 s, keepalive 1 s, operation
// timeout 5 s) and a send timeout of 60 s — unless Defaults is set.
type ClientSettings struct {
	ConnectionTimeout time.Duration `yaml:"connection_timeout"`  // default 2s
	OperationTimeout  time.Duration `yaml:"operation_timeout"`   // default 5s
	KeepAliveInterval time.Duration `yaml:"keep_alive_interval"` // default 1s
	SendTimeout       time.Duration `yaml:"send_timeout"`        // default 60s
	// Defaults: a setting left out is the client's own default
	// (pulsar-client-go v0.19: no dial timeout, keepalive 30 s, operation
	// timeout 30 s, send timeout 30 s), as an application that sets
	// nothing gets; the drill region-blackhole-default-client measures
	// what that costs.
	Defaults bool `yaml:"defaults"`
}

// clientSendTimeout is pulsar-client-go's default SendTimeout (v0.19,
// producer_impl.go defaultSendTimeout).
const clientSendTimeout = 30 * time.Second

// ProducerSpec is one producer.
type ProducerSpec struct {
	Name  string `yaml:"name"`
	Topic string `yaml:"topic"`
	// Region: the client's service URL is that region's brokers; ""
	// means every region's (the multi-region URL).
	Region   string `yaml:"region"`
	Rate     int    `yaml:"rate"` // msgs/s, default 100
	Size     int    `yaml:"size"` // payload bytes, default 256
	Keys     int    `yaml:"keys"` // distinct keys, 0: no key
	Batching bool   `yaml:"batching"`
	// Topics > 0 fans the line out over that many topics: Topic is then a
	// prefix, the topics are TOPIC-00 … TOPIC-(N-1) (zero-padded), each
	// with a producer NAME-00 … of its own, and Rate is the line's total,
	// split evenly (it must divide by Topics). Every check stays per
	// topic. 0: one topic, Topic itself.
	Topics int `yaml:"topics"`
}

// ConsumerSpec is one consumer.
type ConsumerSpec struct {
	Name         string `yaml:"name"`
	Topic        string `yaml:"topic"`
	Subscription string `yaml:"subscription"`
	Region       string `yaml:"region"`
	// Type: exclusive (default), shared, failover, key_shared.
	Type string `yaml:"type"`
	// Ack: in-order (default: each message as received), out-of-order
	// (acked in a shuffled order within a window of 10), cumulative.
	Ack string `yaml:"ack"`
	// Start: subscribe this long after the workload started (from the
	// earliest message) instead of before it: a consumer that reads
	// after the faults gets every message from storage, so what a fault
	// destroyed is lost even if a live consumer saw it first. 0: before.
	Start time.Duration `yaml:"start"`
	// Topics > 0: as a producer's, one consumer NAME-00 … per topic
	// TOPIC-00 …, each on Subscription of its topic.
	Topics int `yaml:"topics"`
}

// FaultSpec is one fault on the schedule.
type FaultSpec struct {
	// At: time since the workload started. AfterMessages instead: once
	// that many messages were acknowledged.
	At            time.Duration `yaml:"at"`
	AfterMessages int           `yaml:"after_messages"`
	// Action: kill (SIGKILL), stop (SIGSTOP), cont (SIGCONT), restart
	// (start again on its data, after a kill), partition, heal (also
	// frees filled disks), wan, disk-full (fills the data directory's
	// filesystem of a bookie, process:NAME, which then runs on a 256 MiB
	// tmpfs of its own), power-loss (SIGKILL of bookies that run on a
	// crash-simulating filesystem, bookie.PowerLossFS: what they had not
	// fsynced is lost, as in a power cut; restart brings them back),
	// switchover (a planned switchover of Namespace to region To, as
	// `meridian admin failover NS --to R --planned` asks it of a broker of
	// the active region; or, with Region instead of Namespace, the
	// region-wide one of every active-standby namespace active in Region,
	// `meridian admin failover --region R --to T --planned`; no target).
	Action string `yaml:"action"`
	// Target: region:NAME, rack:REGION/RACK (its bookies),
	// process:NAME, owner:TOPIC (the broker serving the topic when the
	// fault applies), or ROLE:REGION (broker:east, bookie:east).
	// For partition: region:A (A cut off from every other region and
	// the witness) or regions:A|B,C (A cut off from B and C).
	Target string `yaml:"target"`
	// Name labels the fault in the report (default "ACTION TARGET").
	Name string `yaml:"name"`
	// RTT and BandwidthKbps (action wan, target all): the round trip added
	// to, and the bandwidth cap of, every inter-region replication link
	// (0: none). Gossip and the global store are not slowed.
	RTT           time.Duration `yaml:"rtt"`
	BandwidthKbps int64         `yaml:"bandwidth_kbps"`
	// Namespace, To and Timeout (action switchover): the active-standby
	// namespace to move, the region to make active, and the drain's
	// timeout (default 30 s, the admin command's): past it the
	// switchover aborts and the old region stays active.
	// Region instead of Namespace: the region-wide form, every
	// active-standby namespace active in Region moved to To one at a
	// time, each with Timeout (the first abort ends the run).
	Namespace string        `yaml:"namespace"`
	Region    string        `yaml:"region"`
	To        string        `yaml:"to"`
	Timeout   time.Duration `yaml:"timeout"`
}

// Label is the fault's name in reports.
func (f FaultSpec) Label() string {
	if f.Name != "" {
		return f.Name
	}
	if f.Action == "switchover" && f.Region != "" {
		return "switchover region " + f.Region + " to " + f.To
	}
	if f.Action == "switchover" {
		return "switchover " + f.Namespace + " to " + f.To
	}
	return f.Action + " " + f.Target
}

// Load reads and validates a drill file.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse decodes and validates a drill file's bytes; unknown fields are
// errors (a typo must not silently drop a fault or an expectation).
func Parse(b []byte) (*Scenario, error) {
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	if err := s.fanOut(); err != nil {
		return nil, fmt.Errorf("drill %s: %w", s.Name, err)
	}
	s.defaults()
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("drill %s: %w", s.Name, err)
	}
	return &s, nil
}

func (s *Scenario) defaults() {
	t := &s.Topology
	if len(t.Regions) == 0 {
		t.Regions = []string{"east", "west"}
	}
	if t.Racks == 0 {
		t.Racks = 3
	}
	if t.Bookies == 0 {
		t.Bookies = 3
	}
	if t.Brokers == 0 {
		t.Brokers = 1
	}
	if s.Drain == 0 {
		s.Drain = 60 * time.Second
	}
	c := &s.Workload.Client
	switch {
	case c.Defaults:
		// The client's own: the drill passes zeros, except that it
		// must know how long a send may wait (stopProducing).
		if c.SendTimeout == 0 {
			c.SendTimeout = clientSendTimeout
		}
	default:
		if c.ConnectionTimeout == 0 {
			c.ConnectionTimeout = clientopts.ConnectionTimeout
		}
		if c.OperationTimeout == 0 {
			c.OperationTimeout = clientopts.OperationTimeout
		}
		if c.KeepAliveInterval == 0 {
			c.KeepAliveInterval = clientopts.KeepAliveInterval
		}
		if c.SendTimeout == 0 {
			c.SendTimeout = 60 * time.Second
		}
	}
	for i := range s.Namespaces {
		if len(s.Namespaces[i].Regions) == 0 {
			s.Namespaces[i].Regions = t.Regions
		}
	}
	for i := range s.Workload.Producers {
		p := &s.Workload.Producers[i]
		if p.Name == "" {
			p.Name = fmt.Sprintf("p%d", i+1)
		}
		if p.Rate == 0 {
			p.Rate = 100
		}
		if p.Size == 0 {
			p.Size = 256
		}
	}
	for i := range s.Workload.Consumers {
		c := &s.Workload.Consumers[i]
		if c.Name == "" {
			c.Name = fmt.Sprintf("c%d", i+1)
		}
		if c.Type == "" {
			c.Type = "exclusive"
		}
		if c.Ack == "" {
			c.Ack = "in-order"
		}
	}
}

// maxFanOut bounds a line's topics (each is a client of the drill's).
const maxFanOut = 1000

// fanOut replaces each producer and consumer line with Topics > 0 by one
// line per topic (ProducerSpec.Topics).
func (s *Scenario) fanOut() error {
	var ps []ProducerSpec
	for i, p := range s.Workload.Producers {
		if p.Topics < 0 || p.Topics > maxFanOut {
			return fmt.Errorf("producer %d (%s): topics %d: want 0 to %d", i+1, p.Name, p.Topics, maxFanOut)
		}
		if p.Topics == 0 {
			ps = append(ps, p)
			continue
		}
		if p.Name == "" {
			p.Name = fmt.Sprintf("p%d", i+1)
		}
		if p.Rate == 0 {
			p.Rate = 100 * p.Topics
		}
		if p.Rate < p.Topics || p.Rate%p.Topics != 0 {
			return fmt.Errorf("producer %s: rate %d is the line's total over %d topics: want a multiple of %d", p.Name, p.Rate, p.Topics, p.Topics)
		}
		for j := range p.Topics {
			q := p
			q.Topics, q.Rate = 0, p.Rate/p.Topics
			q.Name, q.Topic = fanName(p.Name, j, p.Topics), fanName(p.Topic, j, p.Topics)
			ps = append(ps, q)
		}
	}
	var cs []ConsumerSpec
	for i, c := range s.Workload.Consumers {
		if c.Topics < 0 || c.Topics > maxFanOut {
			return fmt.Errorf("consumer %d (%s): topics %d: want 0 to %d", i+1, c.Name, c.Topics, maxFanOut)
		}
		if c.Topics == 0 {
			cs = append(cs, c)
			continue
		}
		if c.Name == "" {
			c.Name = fmt.Sprintf("c%d", i+1)
		}
		for j := range c.Topics {
			d := c
			d.Topics = 0
			d.Name, d.Topic = fanName(c.Name, j, c.Topics), fanName(c.Topic, j, c.Topics)
			cs = append(cs, d)
		}
	}
	s.Workload.Producers, s.Workload.Consumers = ps, cs
	return nil
}

// fanName is the j-th of n names from prefix: prefix-07 for j 7 of 100.
func fanName(prefix string, j, n int) string {
	return fmt.Sprintf("%s-%0*d", prefix, len(strconv.Itoa(n-1)), j)
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

func (s *Scenario) validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("name %q: lower-case letters, digits and dashes", s.Name)
	}
	regions := s.Topology.Regions
	for _, r := range regions {
		if !nameRE.MatchString(r) || r == "witness" {
			return fmt.Errorf("region %q: a lower-case name other than witness", r)
		}
	}
	if s.Workload.Duration <= 0 {
		return fmt.Errorf("workload.duration must be set")
	}
	if len(s.Workload.Producers) == 0 {
		return fmt.Errorf("workload: at least one producer")
	}
	nss := map[string]bool{}
	for _, ns := range s.Namespaces {
		if strings.Count(ns.Name, "/") != 1 {
			return fmt.Errorf("namespace %q: want tenant/namespace", ns.Name)
		}
		for _, r := range ns.Regions {
			if !slices.Contains(regions, r) {
				return fmt.Errorf("namespace %s: region %q is not in the topology %v", ns.Name, r, regions)
			}
		}
		nss[ns.Name] = true
	}
	topicNS := func(topic string) string {
		t := strings.TrimPrefix(topic, "persistent://")
		if i := strings.LastIndex(t, "/"); i > 0 {
			return t[:i]
		}
		return ""
	}
	names := map[string]bool{}
	for _, p := range s.Workload.Producers {
		if names[p.Name] {
			return fmt.Errorf("client name %q used twice", p.Name)
		}
		names[p.Name] = true
		if !strings.HasPrefix(p.Topic, "persistent://") || !nss[topicNS(p.Topic)] {
			return fmt.Errorf("producer %s: topic %q: want persistent://TENANT/NS/TOPIC in a namespace of the drill", p.Name, p.Topic)
		}
		if p.Region != "" && !slices.Contains(regions, p.Region) {
			return fmt.Errorf("producer %s: region %q is not in the topology", p.Name, p.Region)
		}
		if p.Rate < 0 || p.Size < 16 {
			return fmt.Errorf("producer %s: rate must be > 0 and size >= 16", p.Name)
		}
	}
	for _, c := range s.Workload.Consumers {
		if names[c.Name] {
			return fmt.Errorf("client name %q used twice", c.Name)
		}
		names[c.Name] = true
		if !nss[topicNS(c.Topic)] || c.Subscription == "" {
			return fmt.Errorf("consumer %s: a topic of the drill's namespaces and a subscription are required", c.Name)
		}
		if c.Region != "" && !slices.Contains(regions, c.Region) {
			return fmt.Errorf("consumer %s: region %q is not in the topology", c.Name, c.Region)
		}
		if !slices.Contains([]string{"exclusive", "shared", "failover", "key_shared"}, c.Type) {
			return fmt.Errorf("consumer %s: type %q: want exclusive, shared, failover or key_shared", c.Name, c.Type)
		}
		if !slices.Contains([]string{"in-order", "out-of-order", "cumulative"}, c.Ack) {
			return fmt.Errorf("consumer %s: ack %q: want in-order, out-of-order or cumulative", c.Name, c.Ack)
		}
		if c.Start < 0 || c.Start >= s.Workload.Duration {
			return fmt.Errorf("consumer %s: start %s: want 0 or less than the workload's duration", c.Name, c.Start)
		}
	}
	for i, f := range s.Faults {
		if f.At > 0 && f.AfterMessages > 0 {
			return fmt.Errorf("fault %d: set at or after_messages, not both", i+1)
		}
		if f.Action != "switchover" && (f.Namespace != "" || f.Region != "" || f.To != "" || f.Timeout != 0) {
			return fmt.Errorf("fault %d (%s): namespace, region, to and timeout belong to a switchover", i+1, f.Label())
		}
		if err := s.validateTarget(f); err != nil {
			return fmt.Errorf("fault %d (%s): %w", i+1, f.Label(), err)
		}
	}
	return nil
}

func (s *Scenario) validateTarget(f FaultSpec) error {
	regions := s.Topology.Regions
	kind, arg, _ := strings.Cut(f.Target, ":")
	switch f.Action {
	case "kill", "stop", "cont", "restart":
		switch kind {
		case "region", "broker", "bookie":
			if !slices.Contains(regions, arg) {
				return fmt.Errorf("target %q: no region %q", f.Target, arg)
			}
		case "rack":
			r, rack, ok := strings.Cut(arg, "/")
			if !ok || !slices.Contains(regions, r) || rack == "" {
				return fmt.Errorf("target %q: want rack:REGION/RACK", f.Target)
			}
		case "process":
			if arg == "" {
				return fmt.Errorf("target %q: want process:NAME", f.Target)
			}
		case "owner":
			if !strings.HasPrefix(arg, "persistent://") {
				return fmt.Errorf("target %q: want owner:persistent://TENANT/NS/TOPIC", f.Target)
			}
		default:
			return fmt.Errorf("target %q: want region:, rack:, process:, owner:, broker: or bookie:", f.Target)
		}
	case "partition":
		switch kind {
		case "region":
			if !slices.Contains(regions, arg) {
				return fmt.Errorf("target %q: no region %q", f.Target, arg)
			}
		case "regions":
			a, b, ok := strings.Cut(arg, "|")
			if !ok {
				return fmt.Errorf("target %q: want regions:A|B,C", f.Target)
			}
			for _, r := range slices.Concat(strings.Split(a, ","), strings.Split(b, ",")) {
				if r != "witness" && !slices.Contains(regions, r) {
					return fmt.Errorf("target %q: no region %q", f.Target, r)
				}
			}
		default:
			return fmt.Errorf("target %q: want region:NAME or regions:A|B,C", f.Target)
		}
	case "disk-full":
		if kind != "process" || arg == "" {
			return fmt.Errorf("disk-full: target process:BOOKIE")
		}
	case "power-loss":
		switch kind {
		case "process":
			if arg == "" {
				return fmt.Errorf("target %q: want process:BOOKIE", f.Target)
			}
		case "bookie":
			if !slices.Contains(regions, arg) {
				return fmt.Errorf("target %q: no region %q", f.Target, arg)
			}
		case "rack":
			r, rack, ok := strings.Cut(arg, "/")
			if !ok || !slices.Contains(regions, r) || rack == "" {
				return fmt.Errorf("target %q: want rack:REGION/RACK", f.Target)
			}
		default:
			return fmt.Errorf("power-loss: target process:BOOKIE, bookie:REGION or rack:REGION/RACK (bookies only)")
		}
	case "heal":
	case "switchover":
		if f.Target != "" {
			return fmt.Errorf("switchover: no target; give namespace (or region) and to")
		}
		switch {
		case f.Namespace != "" && f.Region != "":
			return fmt.Errorf("switchover: namespace or region, not both (region: every active-standby namespace active there)")
		case f.Namespace == "" && f.Region == "":
			return fmt.Errorf("switchover: namespace or region is required (namespace: that one; region: every active-standby namespace active there)")
		case f.Region != "":
			return s.validateRegionSwitchover(f)
		}
		var ns *Namespace
		for i := range s.Namespaces {
			if s.Namespaces[i].Name == f.Namespace {
				ns = &s.Namespaces[i]
			}
		}
		switch {
		case ns == nil:
			return fmt.Errorf("switchover: namespace %q is not one of the drill's", f.Namespace)
		case ns.Replication["failover"] != "active-standby" || len(ns.Regions) < 2:
			return fmt.Errorf("switchover: namespace %s is not active-standby over several regions (replication.failover: active-standby)", ns.Name)
		case !slices.Contains(ns.Regions, f.To):
			return fmt.Errorf("switchover: to %q is not one of namespace %s's regions %v", f.To, ns.Name, ns.Regions)
		case f.Timeout < 0:
			return fmt.Errorf("switchover: timeout %s: want > 0 (0: 30 s)", f.Timeout)
		}
	case "wan":
		if f.Target != "all" || f.RTT < 0 || f.BandwidthKbps < 0 {
			return fmt.Errorf("wan: target all, with rtt and/or bandwidth_kbps >= 0")
		}
	default:
		return fmt.Errorf("action %q: want kill, stop, cont, restart, power-loss, partition, heal, wan, disk-full or switchover", f.Action)
	}
	return nil
}

// validateRegionSwitchover checks a region-wide switchover: both regions
// in the topology and distinct, and some active-standby namespace of the
// drill spanning both (else it would move nothing).
func (s *Scenario) validateRegionSwitchover(f FaultSpec) error {
	regions := s.Topology.Regions
	switch {
	case !slices.Contains(regions, f.Region):
		return fmt.Errorf("switchover: region %q is not in the topology %v", f.Region, regions)
	case !slices.Contains(regions, f.To):
		return fmt.Errorf("switchover: to %q is not in the topology %v", f.To, regions)
	case f.To == f.Region:
		return fmt.Errorf("switchover: to %s is the region itself: give another region", f.To)
	case f.Timeout < 0:
		return fmt.Errorf("switchover: timeout %s: want > 0 (0: 30 s per namespace)", f.Timeout)
	}
	for _, ns := range s.activeStandby() {
		if slices.Contains(ns.Regions, f.Region) && slices.Contains(ns.Regions, f.To) {
			return nil
		}
	}
	return fmt.Errorf("switchover: no active-standby namespace of the drill spans %s and %s: nothing would move", f.Region, f.To)
}

// smallDisks lists the processes whose disk a disk-full fault fills
// (their data directories get a small filesystem of their own).
func (s *Scenario) smallDisks() []string {
	var out []string
	for _, f := range s.Faults {
		if f.Action == "disk-full" {
			_, name, _ := strings.Cut(f.Target, ":")
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// powerLossTargets lists the targets of the drill's power-loss faults
// (their bookies run with --simulate-power-loss).
func (s *Scenario) powerLossTargets() []string {
	var out []string
	for _, f := range s.Faults {
		if f.Action == "power-loss" && !slices.Contains(out, f.Target) {
			out = append(out, f.Target)
		}
	}
	return out
}

// slowsLinks reports whether the drill slows the inter-region links (its
// brokers' replication then goes through proxies).
func (s *Scenario) slowsLinks() bool {
	for _, f := range s.Faults {
		if f.Action == "wan" {
			return true
		}
	}
	return false
}

// partitions reports whether the drill cuts links (it then runs each
// region under its own group id, which needs root).
func (s *Scenario) partitions() bool {
	for _, f := range s.Faults {
		if f.Action == "partition" {
			return true
		}
	}
	return false
}
