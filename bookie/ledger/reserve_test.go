package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// CreateOptions.Reserve runs with the ledger's id before the ledger exists
// (no metadata yet), and a Reserve that fails leaves no ledger behind: a
// caller can record a ledger before any crash could leave it unrecorded.
func TestReserveRunsBeforeTheLedgerExists(t *testing.T) {
	r := testutil.StartRegion(t, "reserve", "r1", "r2", "r3")
	c := newClient(t, r, "r1")
	ctx := ctxT(t, time.Minute)

	var reserved int64
	o := opts(3, 3, 2)
	o.Reserve = func(ctx context.Context, id int64) error {
		reserved = id
		if _, err := ledger.ReadMetadata(ctx, r.Store, id); !errors.Is(err, ledger.ErrNoSuchLedger) {
			t.Errorf("ledger %d at Reserve: err = %v, want ErrNoSuchLedger (no metadata yet)", id, err)
		}
		return nil
	}
	w, err := c.Create(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if reserved == 0 || reserved != w.ID() {
		t.Fatalf("Reserve saw id %d, the ledger is %d", reserved, w.ID())
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	refuse := errors.New("not recorded")
	o.Reserve = func(_ context.Context, id int64) error { reserved = id; return refuse }
	if _, err := c.Create(ctx, o); !errors.Is(err, refuse) {
		t.Fatalf("Create with a failing Reserve: err = %v, want it wrapped", err)
	}
	if _, err := ledger.ReadMetadata(ctx, r.Store, reserved); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("ledger %d after a failed Reserve: err = %v, want ErrNoSuchLedger", reserved, err)
	}
}
