package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/rack"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// `meridian admin bookies list` shows every bookie with its rack, state,
// disk usage and fragment count; `meridian admin recovery status` the
// under-replicated ledgers.
func TestAdminBookiesListAndRecoveryStatus(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	view, err := cluster.WatchBookies(ctx, r.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	lc, err := ledger.New(ledger.Config{Store: r.Store, Bookies: ledger.ViewSource{View: view}})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	for i := 0; i < 2; i++ {
		w, err := lc.Create(ctx, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Placement: rack.DefaultPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Append(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		w.Close(ctx)
	}
	run := func(args ...string) string {
		out, err := exec.Command(testutil.MeridianBinary(t), append(append([]string{"admin"}, args...), "--etcd", r.EtcdURL, "--region", "east")...).CombinedOutput()
		if err != nil {
			t.Fatalf("meridian admin %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := run("bookies", "list")
	for _, b := range r.Bookies {
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, b.ID+" ") {
				line = l
			}
		}
		f := strings.Fields(line)
		if len(f) < 7 || f[3] != b.Rack || f[4] != "writable" || f[len(f)-1] != "2" || !strings.Contains(line, "% of") {
			t.Fatalf("bookie %s: %q in\n%s", b.ID, line, out)
		}
	}
	if out := run("recovery", "status"); !strings.HasPrefix(out, "0 under-replicated") {
		t.Fatalf("recovery status: %s", out)
	}
}
