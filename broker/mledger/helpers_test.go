package mledger_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// TestMain lets this test binary double as a broker process holding a
// managed ledger (kill -9'd by TestCrashKeepsFlushedAcks).
func TestMain(m *testing.M) {
	if os.Getenv("MLEDGER_TEST_OWNER") != "" {
		os.Exit(ownerMain())
	}
	os.Exit(m.Run())
}

// startRegion starts etcd and three bookie processes on three racks.
func startRegion(t testing.TB) *testutil.Region {
	t.Helper()
	return testutil.StartRegion(t, "east", "r1", "r2", "r3")
}

// newLedgerClient returns a ledger client of the region, as one broker
// process would have.
func newLedgerClient(t testing.TB, s *cluster.Store, mutate ...func(*ledger.Config)) *ledger.Client {
	t.Helper()
	view, err := cluster.WatchBookies(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	cfg := ledger.Config{Store: s, Bookies: ledger.ViewSource{View: view}, Region: "east", Rack: "r1", AddTimeout: 3 * time.Second}
	for _, m := range mutate {
		m(&cfg)
	}
	c, err := ledger.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func openML(t testing.TB, s *cluster.Store, lc *ledger.Client, name string, mutate ...func(*mledger.Config)) *mledger.ManagedLedger {
	t.Helper()
	// Keep consumed ledgers unless a test is about trimming: with no
	// durable cursor, every closed ledger counts as consumed (as in Pulsar).
	cfg := mledger.Config{Store: s, Ledgers: lc, MaxEntriesPerLedger: 10, RetentionTime: -1}
	for _, m := range mutate {
		m(&cfg)
	}
	ml, err := mledger.Open(ctxT(t, time.Minute), name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // also when the test fails half-way; Close is idempotent
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = ml.Close(ctx)
	})
	return ml
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func payload(i int) []byte { return []byte(fmt.Sprintf("message %06d ------------------------", i)) }

// appendN appends n payloads starting at index from, pipelined, and returns
// their positions in append order.
func appendN(t testing.TB, ml *mledger.ManagedLedger, from, n int) []mledger.Position {
	t.Helper()
	type res struct {
		i   int
		p   mledger.Position
		err error
	}
	ch := make(chan res, n)
	for i := range n {
		ml.AppendAsync(payload(from+i), func(p mledger.Position, err error) { ch <- res{i, p, err} })
	}
	out := make([]mledger.Position, n)
	for k := range n {
		r := <-ch
		if r.err != nil {
			t.Fatalf("append %d: %v", from+r.i, r.err)
		}
		if r.i != k {
			t.Fatalf("callback %d ran in position %d: callbacks out of append order", r.i, k)
		}
		out[r.i] = r.p
	}
	return out
}

// readAll reads every entry from `from` through ReadEntries.
func readAll(t testing.TB, ml *mledger.ManagedLedger, from mledger.Position, batch int) []mledger.Entry {
	t.Helper()
	var out []mledger.Entry
	ctx := ctxT(t, time.Minute)
	for {
		es, err := ml.ReadEntries(ctx, from, batch, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			return out
		}
		out = append(out, es...)
		from = ml.Next(es[len(es)-1].Pos)
	}
}

func checkEntries(t testing.TB, got []mledger.Entry, want []mledger.Position, firstIndex int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d entries, want %d", len(got), len(want))
	}
	for i, e := range got {
		if e.Pos != want[i] {
			t.Fatalf("entry %d at %s, want %s", i, e.Pos, want[i])
		}
		if string(e.Data) != string(payload(firstIndex+i)) {
			t.Fatalf("entry %s holds %q, want %q", e.Pos, e.Data, payload(firstIndex+i))
		}
	}
}
