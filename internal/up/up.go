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
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	// GossipProfile: "lan" (default) or "fast" (loopback tests).
	GossipProfile string
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
		o.GossipProfile = "lan"
	}
}

// ProcSpec is one process of the plan.
type ProcSpec struct {
	Name   string   `json:"name"`
	Role   string   `json:"role"` // bookie | broker | etcd | global-etcd | witness
	Region string   `json:"region,omitempty"`
	Rack   string   `json:"rack,omitempty"`
	Addr   string   `json:"addr"`            // main address (client URL host:port for etcd)
	Admin  string   `json:"admin,omitempty"` // broker admin address
	Peer   string   `json:"peer,omitempty"`  // etcd peer address
	Gossip string   `json:"gossip,omitempty"`
	Repl   string   `json:"replication,omitempty"` // broker replication (gRPC) address
	Args   []string `json:"args"`
}

// Plan is the whole topology with fixed addresses.
type Plan struct {
	Options Options    `json:"options"`
	Procs   []ProcSpec `json:"procs"`
	Control string     `json:"control"` // the up process's control address
}

// Ports are picked below the kernel's ephemeral range (Linux default
// 32768-60999): a port handed out by the kernel for ":0" may be taken by
// some process's outgoing connection (etcd peers dial each other) before
// the planned process binds it. Each port is handed out once per process.
const portLow, portHigh = 20000, 32000

var (
	portMu   sync.Mutex
	portUsed = map[int]bool{}
)

func freePort(host string) (string, error) {
	portMu.Lock()
	defer portMu.Unlock()
	start := portLow + rand.IntN(portHigh-portLow)
	for i := 0; i < portHigh-portLow; i++ {
		port := portLow + (start-portLow+i)%(portHigh-portLow)
		if portUsed[port] {
			continue
		}
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		portUsed[port] = true
		return addr, nil
	}
	return "", fmt.Errorf("up: no free port in %d-%d on %s", portLow, portHigh, host)
}

// NewPlan assigns names, racks and free ports.
func NewPlan(o Options) (*Plan, error) {
	o.defaults()
	p := &Plan{Options: o}
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
		initial = append(initial, name+"=http://"+a[1])
		ps := ProcSpec{Name: name, Role: role, Addr: a[0], Peer: a[1]}
		if r != "witness" {
			ps.Region = r
		}
		globals = append(globals, ps)
	}
	for i := range globals {
		g := &globals[i]
		g.Args = []string{"etcd", "--name", g.Name, "--data-dir", filepath.Join(o.DataDir, g.Name),
			"--client-url", "http://" + g.Addr, "--peer-url", "http://" + g.Peer, "--initial-cluster", strings.Join(initial, ",")}
	}
	for _, r := range o.Regions {
		a, err := ports(2)
		if err != nil {
			return nil, err
		}
		etcd := ProcSpec{Name: r + "-etcd", Role: "etcd", Region: r, Addr: a[0], Peer: a[1],
			Args: []string{"etcd", "--name", r + "-etcd", "--data-dir", filepath.Join(o.DataDir, r+"-etcd"),
				"--client-url", "http://" + a[0], "--peer-url", "http://" + a[1]}}
		p.Procs = append(p.Procs, etcd)
		for _, g := range globals {
			if g.Region == r {
				p.Procs = append(p.Procs, g)
			}
		}
		for i := 1; i <= o.BookiesPerRegion; i++ {
			a, err := ports(2)
			if err != nil {
				return nil, err
			}
			name := fmt.Sprintf("%s-bookie-%d", r, i)
			rack := fmt.Sprintf("r%d", (i-1)%o.RacksPerRegion+1)
			p.Procs = append(p.Procs, ProcSpec{Name: name, Role: "bookie", Region: r, Rack: rack, Addr: a[0], Gossip: a[1],
				Args: []string{"bookie", "--region", r, "--etcd", "http://" + etcd.Addr, "--id", name, "--rack", rack,
					"--listen", a[0], "--data-dir", filepath.Join(o.DataDir, name)}})
		}
		for i := 1; i <= o.BrokersPerRegion; i++ {
			a, err := ports(4)
			if err != nil {
				return nil, err
			}
			name := fmt.Sprintf("%s-broker-%d", r, i)
			args := []string{"broker", "--region", r, "--etcd", "http://" + etcd.Addr, "--id", name,
				"--listen", a[0], "--admin", a[1], "--replication-listen", a[3], "--global-etcd", globalURLs(globals, r)}
			if o.OwnershipTTL != "" {
				args = append(args, "--ownership-ttl", o.OwnershipTTL)
			}
			if o.FailoverLeaseTTL != "" {
				args = append(args, "--failover-lease-ttl", o.FailoverLeaseTTL)
			}
			p.Procs = append(p.Procs, ProcSpec{Name: name, Role: "broker", Region: r, Addr: a[0], Admin: a[1], Gossip: a[2], Repl: a[3], Args: args})
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
// member first.
func globalURLs(globals []ProcSpec, region string) string {
	var own, rest []string
	for _, g := range globals {
		u := "http://" + g.Addr
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
