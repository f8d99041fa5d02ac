package autorecovery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// A scan that fails half-way (here: a ledger record that does not decode)
// keeps the bookies it knew of. It used to clear them first, so the lost
// bookies it was to be retried for were forgotten: the detector no longer
// saw them absent, no scan was retried, and the status never named them.
func TestFailedScanKeepsKnownBookies(t *testing.T) {
	s := testutil.Store(t, testutil.StartEtcd(t), "/scan")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	good := &metapb.LedgerMetadata{LedgerId: 1, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: metapb.LedgerState_OPEN,
		Fragments: []*metapb.Fragment{{FirstEntryId: 0, Ensemble: []*metapb.BookieRef{{Id: "b1", Rack: "r1"}, {Id: "b2", Rack: "r2"}, {Id: "b3", Rack: "r3"}}}}}
	b, err := proto.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, fmt.Sprintf("/ledgers/%020d", 1), b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, fmt.Sprintf("/ledgers/%020d", 2), []byte("not a ledger")); err != nil {
		t.Fatal(err)
	}
	a, err := NewAuditor(testConfig(t, s, watch(t, s), time.Hour), "a")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{"b1": true, "b2": true, "b3": true, "b4": true, "b5": true}
	if err := a.scan(ctx, map[string]bool{"b4": true, "b5": true}, known, &episode{}, false); err == nil {
		t.Fatal("the scan read an undecodable ledger record without an error")
	}
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
		if !known[id] {
			t.Errorf("after the failed scan, bookie %s is no longer known: %v", id, known)
		}
	}
	// A scan that succeeds forgets the bookies no ledger uses.
	if err := s.Delete(ctx, fmt.Sprintf("/ledgers/%020d", 2)); err != nil {
		t.Fatal(err)
	}
	if err := a.scan(ctx, nil, known, &episode{}, false); err != nil {
		t.Fatal(err)
	}
	if len(known) != 3 || !known["b1"] || !known["b2"] || !known["b3"] {
		t.Errorf("after a full scan known = %v, want b1 b2 b3", known)
	}
}
