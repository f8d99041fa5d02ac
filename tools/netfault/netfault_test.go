package netfault

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// A chain left by a process that no longer runs (a killed test: its
// Close never ran) is removed when the next filter is made; the filter's
// own chain is not touched by a later one.
func TestStaleChainsOfDeadProcessesAreRemoved(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err) // needs root and iptables: the multi-process suites run where they are
	}
	const stale = "MERIDIAN-T999999" // no such pid: above pid_max's default
	if _, err := os.Stat("/proc/999999"); err == nil {
		t.Skip("pid 999999 runs here")
	}
	if err := ipt("-N", stale); err != nil {
		t.Fatal(err)
	}
	if err := ipt("-I", "OUTPUT", "-j", stale); err != nil {
		t.Fatal(err)
	}
	f, err := New("MERIDIAN-T" + strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := exec.Command("iptables", "-w", "-S").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), stale) {
		t.Fatalf("the stale chain %s is still there:\n%s", stale, out)
	}
	if !strings.Contains(string(out), "-N "+f.chain) {
		t.Fatalf("the new filter's chain %s is missing", f.chain)
	}
}
