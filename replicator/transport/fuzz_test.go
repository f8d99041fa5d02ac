package transport

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
)

// FuzzReplicateRequest feeds hostile messages to what a replication
// stream's server runs on each message after the handshake, before the
// topic sees it: the protobuf decode, CheckRequest, the wire conversion
// (BatchFromProto) and the applier's Receive. No panic; a refusal is an
// InvalidArgument status (CheckRequest) or ErrBadBatch/ErrLoop (the
// applier); an accepted batch's write holds the origin's next sequence
// numbers in order, each entry with a valid origin id, and persisting it
// moves the record to the write's state; an accepted subscription update
// names a subscription without control characters.
func FuzzReplicateRequest(f *testing.F) {
	const source, local = "east", "west"
	add := func(req *replpb.ReplicateRequest) {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	entry := func(seq uint64, data string) *replpb.Entry {
		return &replpb.Entry{OriginSeq: seq, PublishMs: 1700000000000, Data: []byte(data),
			OriginId: &replpb.MessageId{Ledger: 12, Entry: int64(seq) - 1, Batch: -1}, PersistedUnixNanos: 5}
	}
	batch := func(b *replpb.Batch) *replpb.ReplicateRequest {
		return &replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Batch{Batch: b}}
	}
	add(batch(&replpb.Batch{Id: 1, Origin: source, Stream: 1, Entries: []*replpb.Entry{entry(1, "a"), entry(2, "b")}, SentUnixNanos: 9}))
	add(batch(&replpb.Batch{Id: 2, Origin: source, Stream: 2, Base: 40, Acked: 7, Entries: []*replpb.Entry{entry(41, "x"), {OriginSeq: 42, Skip: true}}}))
	add(batch(&replpb.Batch{Id: 3, Origin: source, Stream: 1, Entries: []*replpb.Entry{entry(3, "c"), entry(9, "gap")}}))
	add(batch(&replpb.Batch{Id: 4, Origin: local, Stream: 1, Entries: []*replpb.Entry{entry(1, "loop")}}))
	add(batch(&replpb.Batch{Id: 5, Origin: source, Stream: 1, Entries: []*replpb.Entry{{OriginSeq: 1, Data: []byte("no id")}}}))
	add(batch(&replpb.Batch{Id: 6, Origin: source, Stream: 1, Entries: []*replpb.Entry{{OriginSeq: 1, OriginId: &replpb.MessageId{Ledger: -1, Entry: -5, Batch: -9}}}}))
	add(batch(&replpb.Batch{Id: 7, Origin: source, Entries: []*replpb.Entry{entry(1, "no stream")}}))
	add(batch(&replpb.Batch{Id: 8, Origin: source, Stream: 1, Entries: []*replpb.Entry{entry(0, "seq 0")}}))
	add(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Subscription{Subscription: &replpb.SubscriptionUpdate{Name: "sub",
		MarkDelete: &replpb.MessageId{Ledger: 12, Entry: 4, Batch: -1}, Acked: []*replpb.MessageId{{Ledger: 12, Entry: 7, Batch: -1}}}}})
	add(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Subscription{Subscription: &replpb.SubscriptionUpdate{Name: "bad\nname"}}})
	add(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Subscription{Subscription: &replpb.SubscriptionUpdate{Name: strings.Repeat("s", 2000)}}})
	add(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Hello{Hello: &replpb.Hello{Version: 1, Source: source, Target: local, Topic: "persistent://a/b/c"}}})
	add(&replpb.ReplicateRequest{})
	f.Add([]byte{0x12, 0x02, 0x32, 0x00})                // a batch holding one empty entry
	f.Add([]byte{0x12, 0x05, 0x12, 0x03, 'e', 'a', 's'}) // a truncated origin
	f.Add([]byte{0xff, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, raw []byte) {
		var req replpb.ReplicateRequest
		if proto.Unmarshal(raw, &req) != nil {
			return // gRPC refuses what does not decode before the server sees it
		}
		if err := CheckRequest(&req, source); err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("CheckRequest(%v): %v is not InvalidArgument", &req, err)
			}
			return
		}
		if su := req.GetSubscription(); su != nil {
			if su.GetName() == "" || strings.ContainsFunc(su.GetName(), func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("accepted subscription name %q", su.GetName())
			}
			return
		}
		pb := req.GetBatch()
		if pb == nil {
			t.Fatalf("CheckRequest accepted %v: neither a batch nor a subscription update", &req)
		}
		b := BatchFromProto(pb, 1)
		if len(b.Entries) != len(pb.GetEntries()) || b.Origin != source {
			t.Fatalf("BatchFromProto(%v) = %+v", pb, b)
		}
		// Round trip: what is applied is what was sent.
		if back := BatchToProto(b, pb.GetSentUnixNanos()); len(back.Entries) != len(pb.Entries) || back.Id != pb.Id || back.Stream != pb.Stream {
			t.Fatalf("BatchToProto(BatchFromProto(%v)) = %v", pb, back)
		}
		a, err := replicator.NewApplier(local, replicator.State{Origin: source, Stream: 1, Through: 2})
		if err != nil {
			t.Fatal(err)
		}
		before := a.State()
		res, err := a.Receive(b)
		if err != nil {
			if !errors.Is(err, replicator.ErrBadBatch) && !errors.Is(err, replicator.ErrLoop) {
				t.Fatalf("Receive(%+v): %v is neither ErrBadBatch nor ErrLoop", b, err)
			}
			return
		}
		w := res.Write
		if w == nil {
			return
		}
		if w.Origin != source || w.Prev != before {
			t.Fatalf("write %+v does not extend the record %v", w, before)
		}
		next := w.Prev.Through
		if w.State.Stream != w.Prev.Stream {
			next = max(next, w.Skipped.Through)
		}
		for _, e := range w.Entries {
			if e.OriginSeq != next+1 {
				t.Fatalf("write %+v: seq %d after %d", w, e.OriginSeq, next)
			}
			next = e.OriginSeq
			if !e.Skip && (e.OriginID.Ledger < 0 || e.OriginID.Entry < 0 || e.OriginID.Batch < -1) {
				t.Fatalf("write %+v: entry seq %d with origin id %+v", w, e.OriginSeq, e.OriginID)
			}
		}
		if next != w.State.Through {
			t.Fatalf("write %+v: entries end at %d, its state at %d", w, next, w.State.Through)
		}
		if _, err := a.Persisted(w); err != nil || a.State() != w.State {
			t.Fatalf("Persisted(%+v): %v, record %v", w, err, a.State())
		}
	})
}
