package georep

import (
	"fmt"
	"os"
	"testing"

	"github.com/meridian-mq/meridian/tools/netfault"
	"github.com/meridian-mq/meridian/tools/up"
)

// Network faults between processes on one host (tools/netfault:
// iptables rules in a chain of the test's own, an owner match on each
// region's group id). The test's own clients (root's group) still reach
// every region. A dropped packet is a silent fault: no reset, the sender
// notices only by timeouts.

// regionGIDs are the group ids the partition tests run regions with: this
// test binary's own (netfault.GIDs), so a concurrent run is not cut too.
var regionGIDs = netfault.GIDs("east", "west", "witness", "north")

type netFilter struct {
	t *testing.T
	f *netfault.Filter
}

// newNetFilter needs root and iptables with the owner match (.ci/run
// installs iptables); it fails the test otherwise.
func newNetFilter(t *testing.T) *netFilter {
	t.Helper()
	f, err := netfault.New(fmt.Sprintf("MERIDIAN-T%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &netFilter{t: t, f: f}
}

// drop drops TCP and UDP packets to each of ports sent by processes of
// group gid (any process when gid is 0).
func (n *netFilter) drop(ports []int, gid uint32) {
	n.t.Helper()
	if err := n.f.Drop(ports, gid); err != nil {
		n.t.Fatal(err)
	}
}

// heal removes every rule.
func (n *netFilter) heal() {
	n.t.Helper()
	if err := n.f.Heal(); err != nil {
		n.t.Fatal(err)
	}
}

// isolate cuts region off from every other region and the witness, both
// ways. The deployment must run with RegionGIDs = regionGIDs.
func (n *netFilter) isolate(d *deployment, region string) {
	n.t.Helper()
	others := []string{"witness"}
	for _, r := range d.d.Plan.Options.Regions {
		if r != region {
			others = append(others, r)
		}
	}
	if err := n.f.Isolate(d.d.Plan, []string{region}, others); err != nil {
		n.t.Fatal(err)
	}
}

// ports lists every port the matching processes listen on.
func (d *deployment) ports(match func(up.ProcSpec) bool) []int {
	return netfault.Ports(d.d.Plan, match)
}
