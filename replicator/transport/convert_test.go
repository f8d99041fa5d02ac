package transport

import (
	"testing"

	"github.com/meridian-mq/meridian/replicator"
)

// Issue 34: the origin's persistence time of every entry and the batch's
// send time cross the wire (the target's stage and store-to-store
// metrics), and the target stamps its receipt; the origin's read time
// does not cross.
func TestBatchCarriesPersistAndSendTimes(t *testing.T) {
	b := replicator.Batch{ID: 3, Origin: "east", Stream: 1, Entries: []replicator.Entry{
		{Origin: "east", OriginSeq: 1, Data: []byte("a"), Stamps: replicator.Stamps{Persisted: 100, Read: 150}},
		{Origin: "east", OriginSeq: 2, Data: []byte("b"), Stamps: replicator.Stamps{Persisted: 120, Read: 150}},
	}}
	got := BatchFromProto(BatchToProto(b, 200), 230)
	for i, want := range []replicator.Stamps{{Persisted: 100, Sent: 200, Received: 230}, {Persisted: 120, Sent: 200, Received: 230}} {
		if s := got.Entries[i].Stamps; s != want {
			t.Fatalf("entry %d: stamps %+v after the wire, want %+v", i, s, want)
		}
	}
}
