package autorecovery

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/tools/testutil"
)

// Issue 28 §2, `meridian autorecovery`'s HTTP port (--metrics): /healthz,
// /readyz and /metrics. Two processes, one elected auditor and one
// standing by: both ready (etcd answers, in the election, every worker
// holding its lease). The region's etcd paused: not ready, naming
// "metadata-store", still live (a loop waiting on etcd is not wedged);
// green again after.
func TestAutorecoveryProbes(t *testing.T) {
	etcd, url := testutil.StartEtcdProc(t, "east-etcd")
	var bases []string
	for _, id := range []string{"ar-1", "ar-2"} {
		addr := testutil.FreeAddr(t)
		testutil.StartProc(t, id, testutil.MeridianBinary(t), "autorecovery", "--region", "east", "--etcd", url, "--id", id,
			"--metrics", addr, "--log-level", "warn")
		bases = append(bases, "http://"+addr)
	}
	for _, base := range bases {
		testutil.WaitProbe(t, base+"/readyz", 200, "ok", 30*time.Second)
		if code, body := testutil.Probe(base + "/healthz"); code != 200 || body != "ok" {
			t.Fatalf("%s/healthz: %d %q", base, code, body)
		}
		if code, body := testutil.Probe(base + "/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
			t.Fatalf("%s/metrics: %d", base, code)
		}
	}
	etcd.Signal(syscall.SIGSTOP)
	for _, base := range bases {
		testutil.WaitProbe(t, base+"/readyz", 503, "not ready: metadata-store", 15*time.Second)
		if code, body := testutil.Probe(base + "/healthz"); code != 200 {
			t.Fatalf("etcd paused: %s/healthz %d %q, want 200", base, code, body)
		}
	}
	etcd.Signal(syscall.SIGCONT)
	for _, base := range bases {
		testutil.WaitProbe(t, base+"/readyz", 200, "ok", 60*time.Second)
	}
}
