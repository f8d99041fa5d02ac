package up_test

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/tools/up"
)

// listenerFlags are, per role, the flags naming a listener: each role's
// listeners have fixed default ports (6650, 8080, 6660, 3181, 8000, 2379,
// 2380: issue 28), one process's per host, so a plan of many processes on
// one host must give every one of them in every process.
var listenerFlags = map[string][]string{
	"broker": {"--listen", "--admin", "--replication-listen", "--gossip-addr"},
	"bookie": {"--listen", "--metrics", "--gossip-addr"},
	"etcd":   {"--client-url", "--peer-url"},
}

// planAddrs returns the host:port each listener flag of ps gives.
func planAddrs(t *testing.T, ps up.ProcSpec) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 0; i+1 < len(ps.Args); i++ {
		v := ps.Args[i+1]
		if u, err := url.Parse(v); err == nil && u.Host != "" && strings.Contains(v, "://") {
			v = u.Host
		}
		out[ps.Args[i]] = v
	}
	return out
}

// Requirement (issue 28): `meridian up` runs every process on one host,
// so it gives every listener of every process a port of its own — none is
// left to its role's fixed default, no two share one.
func TestPlanGivesEveryListenerItsOwnPort(t *testing.T) {
	plan, err := up.NewPlan(up.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, ps := range plan.Procs {
		role := ps.Args[0]
		addrs := planAddrs(t, ps)
		for _, f := range listenerFlags[role] {
			a, ok := addrs[f]
			if !ok || a == "" {
				t.Errorf("%s (%s): no %s: it would take its role's default port", ps.Name, role, f)
				continue
			}
			if other, dup := seen[a]; dup {
				t.Errorf("%s %s %s: %s has it already", ps.Name, f, a, other)
			}
			seen[a] = ps.Name + " " + f
		}
	}
	if len(seen) < 40 {
		t.Fatalf("only %d listeners planned: the plan was not read", len(seen))
	}
}

// A plan saved before bookies listened on HTTP by default: loading it
// gives each bookie a --metrics port of its own.
func TestLoadPlanGivesOldBookiesAMetricsPort(t *testing.T) {
	dir := t.TempDir()
	plan, err := up.NewPlan(up.Options{DataDir: dir, Regions: []string{"east"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range plan.Procs {
		ps := &plan.Procs[i]
		if ps.Role == "bookie" {
			j := slices.Index(ps.Args, "--metrics")
			ps.Args = slices.Delete(ps.Args, j, j+2)
			ps.Metrics = ""
		}
	}
	b, _ := json.Marshal(plan)
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := up.LoadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ps := range loaded.Procs {
		if ps.Role != "bookie" {
			continue
		}
		a := planAddrs(t, ps)["--metrics"]
		if a == "" || a != ps.Metrics || seen[a] {
			t.Errorf("%s: --metrics %q (Metrics %q)", ps.Name, a, ps.Metrics)
		}
		seen[a] = true
	}
}

// Issue 30: a TLS deployment's bookies and etcd members (region, global
// and witness) start with --require-client-auth, so that one whose TLS
// settings went missing refuses to start instead of serving its port to
// any caller; a plaintext deployment's do not (they would refuse to
// start).
func TestTLSPlanRequiresClientAuthOnBookiesAndEtcd(t *testing.T) {
	for _, tls := range []bool{true, false} {
		plan, err := up.NewPlan(up.Options{DataDir: t.TempDir(), TLS: tls})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ps := range plan.Procs {
			role := ps.Args[0]
			has := slices.Contains(ps.Args, "--require-client-auth")
			want := tls && (role == "bookie" || role == "etcd")
			if has != want {
				t.Errorf("TLS %v: %s (%s): --require-client-auth %v, want %v", tls, ps.Name, role, has, want)
			}
			if want {
				n++
			}
		}
		if tls && n < 8 {
			t.Errorf("TLS plan: only %d bookies and etcd members require client auth", n)
		}
	}
}
