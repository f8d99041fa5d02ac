// Package up runs a local multi-region deployment as separate OS
// processes — each region's etcd, bookies (spread over racks) and brokers,
// a global-store etcd member per region plus a witness member — as
// `meridian up` does, so drills can kill -9 any of them. It writes
// DIR/endpoints.json, whose shape is a contract for drills and tools.
//
// Caller's duties:
//  1. Plan a topology (NewPlan, or LoadPlan to reuse DIR's ports and names).
//  2. Start it (Start): every process runs the same meridian binary.
//  3. Stop it (Stop) — children get SIGTERM, then SIGKILL; nothing is ever
//     restarted by itself (a drill needs dead processes to stay dead);
//     Restart(name) brings one back on the same data.
package up

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/internal/ports"
)

// Options describe the topology.
type Options struct {
	Regions          []string // default east, west
	BrokersPerRegion int      // default 2
	BookiesPerRegion int      // default 4: E=3 plus one spare
	RacksPerRegion   int      // default 3: one more than the rule needs
	DataDir          string   // default ./data/up
	Host             string   // default 127.0.0.1
	// OwnershipTTL for brokers, e.g. "5s" (empty: broker default).
	OwnershipTTL string
	// FailoverLeaseTTL for brokers, e.g. "3s" (empty: broker default).
	FailoverLeaseTTL string
	// GossipProfile: "meridian" (default), "lan" or "fast" (loopback tests).
	GossipProfile string
	// RegionGIDs, if set, runs the processes of a region (key: region
	// name, or "witness") with that group id, so packet filters can tell
	// regions apart on one host (iptables' owner match: network fault
	// tests cut a region off). Needs root.
	RegionGIDs map[string]uint32 `json:",omitempty"`
	// ReplicationProxies: each broker advertises a second address for its
	// replication gRPC (ProcSpec.ReplProxy) that the caller serves with a
	// proxy to the real one (drills slow the inter-region links there:
	// tools/wanproxy). Until the proxy runs, other regions cannot
	// replicate to the broker.
	ReplicationProxies bool `json:",omitempty"`
	// TLS runs every process with TLS (tls.go): a local CA and a
	// certificate per process in DATA-DIR/tls, pulsar+ssl:// and https://
	// listeners, mutual TLS on every gRPC and etcd link.
	TLS bool `json:",omitempty"`
}

func (o *Options) defaults() {
	if len(o.Regions) == 0 {
		o.Regions = []string{"east", "west"}
	}
	if o.BrokersPerRegion == 0 {
		o.BrokersPerRegion = 2
	}
	if o.BookiesPerRegion == 0 {
		o.BookiesPerRegion = 4
	}
	if o.RacksPerRegion == 0 {
		o.RacksPerRegion = 3
	}
	if o.DataDir == "" {
		o.DataDir = "./data/up"
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.GossipProfile == "" {
		o.GossipProfile = "meridian"
	}
}

// ProcSpec is one process of the plan.
type ProcSpec struct {
	Name   string `json:"name"`
	Role   string `json:"role"` // bookie | broker | etcd | global-etcd | witness
	Region string `json:"region,omitempty"`
	Rack   string `json:"rack,omitempty"`
	Addr   string `json:"addr"`            // main address (client URL host:port for etcd)
	Admin  string `json:"admin,omitempty"` // broker admin address
	Peer   string `json:"peer,omitempty"`  // etcd peer address
	Gossip string `json:"gossip,omitempty"`
	Repl   string `json:"replication,omitempty"` // broker replication (gRPC) address
	// Metrics: a bookie's HTTP (/metrics) address. Every listener of
	// every process is planned here: the roles' default ports (6650,
	// 8080, 6660, 3181, 8000, 2379, 2380) are one process's per host.
	Metrics string `json:"metrics,omitempty"`
	// ReplProxy: the replication address the broker advertises, served by
	// the caller's proxy (Options.ReplicationProxies).
	ReplProxy string   `json:"replication_proxy,omitempty"`
	Args      []string `json:"args"`
}

// Plan is the whole topology with fixed addresses.
type Plan struct {
	Options Options    `json:"options"`
	Procs   []ProcSpec `json:"procs"`
	Control string     `json:"control"` // the up process's control address
}

// freePort plans a port (package ports: below the ephemeral range, never
// handed out twice on this machine while its planner lives).
func freePort(host string) (string, error) { return ports.Free(host) }

// NewPlan assigns names, racks and free ports.
func NewPlan(o Options) (*Plan, error) {
	o.defaults()
	p := &Plan{Options: o}
	h := o.scheme()
	ports := func(n int) ([]string, error) {
		out := make([]string, n)
		for i := range out {
			a, err := freePort(o.Host)
			if err != nil {
				return nil, err
			}
			out[i] = a
		}
		return out, nil
	}
	// The global store: a member per region and a witness.
	var initial []string
	var globals []ProcSpec
	for _, r := range append(append([]string{}, o.Regions...), "witness") {
		a, err := ports(2)
		if err != nil {
			return nil, err
		}
		name, role := "global-"+r, "global-etcd"
		if r == "witness" {
			name, role = "witness", "witness"
		}
		initial = append(initial, name+"="+h+a[1])
		ps := ProcSpec{Name: name, Role: role, Addr: a[0], Peer: a[1]}
		if r != "witness" {
			ps.Region = r
		}
		globals = append(globals, ps)
	}
	for i := range globals {
		g := &globals[i]
		g.Args = []string{"etcd", "--name", g.Name, "--data-dir", filepath.Join(o.DataDir, g.Name),
			"--client-url", h + g.Addr, "--peer-url", h + g.Peer, "--initial-cluster", strings.Join(initial, ",")}
		if g.Role == "witness" {
			// The witness leads the global store: losing a region then
			// never changes the leader, which would extend every lease
			// (the dead region's failover lease too) by its TTL.
			g.Args = append(g.Args, "--prefer-leader")
		}
	}
	for _, r := range o.Regions {
		a, err := ports(2)
		if err != nil {
			return nil, err
		}
		etcd := ProcSpec{Name: r + "-etcd", Role: "etcd", Region: r, Addr: a[0], Peer: a[1],
			Args: []string{"etcd", "--name", r + "-etcd", "--data-dir", filepath.Join(o.DataDir, r+"-etcd"),
				"--client-url", h + a[0], "--peer-url", h + a[1]}}
		p.Procs = append(p.Procs, etcd)
		for _, g := range globals {
			if g.Region == r {
				p.Procs = append(p.Procs, g)
			}
		}
		for i := 1; i <= o.BookiesPerRegion; i++ {
			a, err := ports(3)
			if err != nil {
				return nil, err
			}
			name := fmt.Sprintf("%s-bookie-%d", r, i)
			rack := fmt.Sprintf("r%d", (i-1)%o.RacksPerRegion+1)
			p.Procs = append(p.Procs, ProcSpec{Name: name, Role: "bookie", Region: r, Rack: rack, Addr: a[0], Gossip: a[1], Metrics: a[2],
				// The global store too: stretched ledgers' metadata is
				// there, and the bookie's garbage collection must see it.
				Args: []string{"bookie", "--region", r, "--etcd", h + etcd.Addr, "--global-etcd", globalURLs(globals, r, h), "--id", name, "--rack", rack,
					"--listen", a[0], "--metrics", a[2], "--data-dir", filepath.Join(o.DataDir, name)}})
		}
		for i := 1; i <= o.BrokersPerRegion; i++ {
			a, err := ports(4)
			if err != nil {
				return nil, err
			}
			name := fmt.Sprintf("%s-broker-%d", r, i)
			args := []string{"broker", "--region", r, "--etcd", h + etcd.Addr, "--id", name,
				"--listen", a[0], "--admin", a[1], "--replication-listen", a[3], "--global-etcd", globalURLs(globals, r, h),
				// One host, no load balancer to take a stopping broker out
				// of rotation: hand over at once (drills time SIGTERMs).
				"--shutdown-drain-delay", "0s"}
			if o.OwnershipTTL != "" {
				args = append(args, "--ownership-ttl", o.OwnershipTTL)
			}
			if o.FailoverLeaseTTL != "" {
				args = append(args, "--failover-lease-ttl", o.FailoverLeaseTTL)
			}
			ps := ProcSpec{Name: name, Role: "broker", Region: r, Addr: a[0], Admin: a[1], Gossip: a[2], Repl: a[3]}
			if o.ReplicationProxies {
				px, err := freePort(o.Host)
				if err != nil {
					return nil, err
				}
				ps.ReplProxy = px
				args = append(args, "--replication-advertise", px)
			}
			ps.Args = args
			p.Procs = append(p.Procs, ps)
		}
	}
	for _, g := range globals {
		if g.Role == "witness" {
			p.Procs = append(p.Procs, g)
		}
	}
	// Every broker and bookie gossips across all regions; the brokers are
	// the seeds.
	var seeds []string
	for _, ps := range p.Procs {
		if ps.Role == "broker" {
			seeds = append(seeds, ps.Gossip)
		}
	}
	for i := range p.Procs {
		ps := &p.Procs[i]
		if ps.Gossip != "" {
			ps.Args = append(ps.Args, "--gossip-addr", ps.Gossip, "--gossip-seeds", strings.Join(seeds, ","), "--gossip-profile", o.GossipProfile)
			if o.TLS {
				ps.Args = append(ps.Args, "--gossip-key-file", GossipKeyFile(o.DataDir))
			}
		}
	}
	if o.TLS {
		for i := range p.Procs {
			ps := &p.Procs[i]
			ps.Args = append(ps.Args, tlsArgs(o.DataDir, ps.Name)...)
			if ps.Args[0] == "bookie" || ps.Args[0] == "etcd" {
				// Mutual TLS is what they authenticate callers with: a
				// bookie or an etcd member of a TLS deployment refuses to
				// start rather than serve an unauthenticated port.
				ps.Args = append(ps.Args, "--require-client-auth")
			}
		}
	}
	c, err := freePort(o.Host)
	if err != nil {
		return nil, err
	}
	p.Control = c
	return p, nil
}

// globalURLs lists the global store's client URLs, the region's own
// member first, each named by its region ("east=http://...": brokers stop
// sending requests to the members of regions they see unreachable; the
// witness is never avoided).
func globalURLs(globals []ProcSpec, region, scheme string) string {
	var own, rest []string
	for _, g := range globals {
		u := scheme + g.Addr
		if g.Role == "global-etcd" && g.Region != "" {
			u = g.Region + "=" + u
		}
		if g.Region == region {
			own = append(own, u)
		} else {
			rest = append(rest, u)
		}
	}
	return strings.Join(append(own, rest...), ",")
}

func planPath(dir string) string { return filepath.Join(dir, "plan.json") }

// LoadPlan reads the plan a previous `up` wrote in dir (same ports, same
// data), or returns os.ErrNotExist.
func LoadPlan(dir string) (*Plan, error) {
	b, err := os.ReadFile(planPath(dir))
	if err != nil {
		return nil, err
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("up: %s: %w", planPath(dir), err)
	}
	// A plan of before bookies listened on HTTP by default (issue 28)
	// leaves them to the default port, which only one could take: plan
	// one for each (saved with the plan at Start).
	for i := range p.Procs {
		ps := &p.Procs[i]
		if ps.Role == "bookie" && ps.Metrics == "" && !slices.Contains(ps.Args, "--metrics") {
			a, err := freePort(p.Options.Host)
			if err != nil {
				return nil, err
			}
			ps.Metrics = a
			ps.Args = append(ps.Args, "--metrics", a)
		}
	}
	return &p, nil
}

// Save writes the plan to its data dir.
func (p *Plan) Save() error {
	if err := os.MkdirAll(p.Options.DataDir, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(p, "", "  ")
	return os.WriteFile(planPath(p.Options.DataDir), b, 0o644)
}

// Proc returns the spec of a named process.
func (p *Plan) Proc(name string) (ProcSpec, bool) {
	for _, ps := range p.Procs {
		if ps.Name == name {
			return ps, true
		}
	}
	return ProcSpec{}, false
}
