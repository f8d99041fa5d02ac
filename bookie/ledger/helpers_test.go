package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/digest"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// newClient returns a ledger client on the region's metadata, reading with
// locality (region, rack).
func newClient(t testing.TB, r *testutil.Region, rk string, mutate ...func(*ledger.Config)) *ledger.Client {
	t.Helper()
	view, err := cluster.WatchBookies(context.Background(), r.Store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	cfg := ledger.Config{Store: r.Store, Bookies: ledger.ViewSource{View: view}, Region: r.Name, Rack: rk, AddTimeout: 3 * time.Second}
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

func payloadOf(ledgerID, entry int64) []byte {
	return []byte(fmt.Sprintf("ledger %d entry %06d payload ----------------------------------------", ledgerID, entry))
}

// readDirect reads an entry from one bookie by address, bypassing the
// ledger client: proof that this replica itself holds the entry.
func readDirect(t testing.TB, addr string, ledgerID, entryID int64) *bookiepb.ReadEntryResponse {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := bookiepb.NewBookieClient(cc).ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: ledgerID, EntryId: entryID})
	if err != nil {
		t.Fatalf("direct read %d/%d from %s: %v", ledgerID, entryID, addr, err)
	}
	if resp.Status == bookiepb.Status_OK && digest.Entry(ledgerID, entryID, resp.Lac, resp.Payload) != resp.Digest {
		t.Fatalf("direct read %d/%d from %s: digest mismatch", ledgerID, entryID, addr)
	}
	return resp
}

func writeSet(e int64, ens, qw int) []int {
	ws := make([]int, qw)
	for w := range qw {
		ws[w] = int((e + int64(w)) % int64(ens))
	}
	return ws
}

func opts(e, qw, qa int) ledger.CreateOptions {
	return ledger.CreateOptions{EnsembleSize: e, WriteQuorum: qw, AckQuorum: qa, Placement: rack.DefaultPolicy()}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func readMeta(ctx context.Context, r *testutil.Region, id int64) (*metapb.LedgerMetadata, error) {
	m, err := ledger.ReadMetadata(ctx, r.Store, id)
	if err != nil {
		return nil, err
	}
	return m.Meta, nil
}
