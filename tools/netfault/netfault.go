// Package netfault cuts network links between the processes of a
// `meridian up` deployment on one host, for real: iptables rules in a chain
// of its own, jumped to from OUTPUT. Each region's processes run with their
// own group id (up.Options.RegionGIDs), so a rule drops what one region's
// processes send to another region's ports (iptables' owner match) while
// the drill's or test's own clients (another group) still reach every
// region. A dropped packet is a silent fault: no reset; the sender notices
// only through its timeouts. Gossip's UDP is dropped too.
//
// Needs root and iptables (Debian's iptables package, nftables-backed).
package netfault

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/meridian-mq/meridian/tools/up"
)

// Filter owns one iptables chain.
type Filter struct {
	chain string
	mu    sync.Mutex
	rules int
}

// Available reports why network faults cannot run here, or nil.
func Available() error {
	if os.Getuid() != 0 {
		return errors.New("netfault: network faults need root (iptables)")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return errors.New("netfault: network faults need iptables (apt-get install iptables)")
	}
	return nil
}

// New creates the chain (named after name, which must be unique on the
// host, e.g. with the pid) and hooks it into OUTPUT. Close removes both.
func New(name string) (*Filter, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	removeStale()
	f := &Filter{chain: name}
	if len(f.chain) > 28 {
		f.chain = f.chain[:28]
	}
	if err := ipt("-N", f.chain); err != nil {
		return nil, err
	}
	if err := ipt("-I", "OUTPUT", "-j", f.chain); err != nil {
		ipt("-X", f.chain)
		return nil, err
	}
	return f, nil
}

// removeStale removes the chains a killed test or drill left behind
// (MERIDIAN-T<pid>, MERIDIAN-D<pid> of a process that no longer runs):
// its Close never ran, and its rules would drop traffic of any later run
// on the same group ids. Best effort.
func removeStale() {
	out, err := exec.Command("iptables", "-w", "-S").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		chain, ok := strings.CutPrefix(line, "-N ")
		if !ok || !(strings.HasPrefix(chain, "MERIDIAN-T") || strings.HasPrefix(chain, "MERIDIAN-D")) {
			continue
		}
		pid, err := strconv.Atoi(chain[len("MERIDIAN-T"):])
		if err != nil || pid <= 0 || processRuns(pid) {
			continue
		}
		_ = ipt("-D", "OUTPUT", "-j", chain)
		_ = ipt("-F", chain)
		_ = ipt("-X", chain)
	}
}

// processRuns reports whether a process with pid exists.
func processRuns(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

func ipt(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Close removes every rule and the chain.
func (f *Filter) Close() error {
	e1 := ipt("-D", "OUTPUT", "-j", f.chain)
	e2 := ipt("-F", f.chain)
	e3 := ipt("-X", f.chain)
	return errors.Join(e1, e2, e3)
}

// Drop drops TCP and UDP packets to each of ports sent by processes of
// group gid (any process when gid is 0).
func (f *Filter) Drop(ports []int, gid uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range ports {
		for _, proto := range []string{"tcp", "udp"} {
			args := []string{"-A", f.chain, "-p", proto, "--dport", strconv.Itoa(p)}
			if gid != 0 {
				args = append(args, "-m", "owner", "--gid-owner", strconv.FormatUint(uint64(gid), 10))
			}
			if err := ipt(append(args, "-j", "DROP")...); err != nil {
				return err
			}
			f.rules++
		}
	}
	return nil
}

// Heal removes every rule.
func (f *Filter) Heal() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = 0
	return ipt("-F", f.chain)
}

// Rules is how many rules are in place.
func (f *Filter) Rules() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rules
}

// Isolate cuts group a off from group b, both ways: a's processes' packets
// to b's ports and b's to a's are dropped. A group is a set of regions of
// the plan ("witness" names the global store's witness). The plan must
// run with RegionGIDs covering every region of both groups.
func (f *Filter) Isolate(p *up.Plan, a, b []string) error {
	gids := p.Options.RegionGIDs
	for _, r := range slices.Concat(a, b) {
		if gids[r] == 0 {
			return fmt.Errorf("netfault: region %q runs without its own group id (up.Options.RegionGIDs)", r)
		}
	}
	in := func(set []string) func(up.ProcSpec) bool {
		return func(ps up.ProcSpec) bool { return slices.Contains(set, RegionOf(ps)) }
	}
	pa, pb := Ports(p, in(a)), Ports(p, in(b))
	for _, r := range a {
		if err := f.Drop(pb, gids[r]); err != nil {
			return err
		}
	}
	for _, r := range b {
		if err := f.Drop(pa, gids[r]); err != nil {
			return err
		}
	}
	return nil
}

// RegionOf is the region a process belongs to for network faults: its
// region, or "witness" for the global store's witness.
func RegionOf(ps up.ProcSpec) string {
	if ps.Role == "witness" {
		return "witness"
	}
	return ps.Region
}

// Ports lists every port the matching processes listen on.
func Ports(p *up.Plan, match func(up.ProcSpec) bool) []int {
	var out []int
	for _, ps := range p.Procs {
		if !match(ps) {
			continue
		}
		for _, a := range []string{ps.Addr, ps.Admin, ps.Peer, ps.Gossip, ps.Repl} {
			if a == "" {
				continue
			}
			_, port, err := net.SplitHostPort(a)
			if n, _ := strconv.Atoi(port); err == nil && n > 0 {
				out = append(out, n)
			}
		}
	}
	return out
}

// GIDs returns a group id for each of names (regions, and "witness"),
// from a block of this process's own: derived from its pid, so two test
// binaries or drills running at once on one host never drop each other's
// traffic (fixed ids did: a test cutting east's group cut the east of a
// concurrent run too). Blocks of 16 ids from 40000; names past the 16th
// share the block's last id.
func GIDs(names ...string) map[string]uint32 {
	base := 40000 + uint32(os.Getpid()%4096)*16
	m := make(map[string]uint32, len(names))
	for i, n := range names {
		m[n] = base + uint32(min(i, 15))
	}
	return m
}
