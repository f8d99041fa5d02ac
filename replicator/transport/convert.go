package transport

import (
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
)

// Wire conversions between the replicator core's values and the
// replication protocol's messages.

// BatchToProto is b on the wire, sent at sentNs (Unix ns; the entries'
// Stamps.Sent on the target, 0 unknown).
func BatchToProto(b replicator.Batch, sentNs int64) *replpb.Batch {
	out := &replpb.Batch{Id: b.ID, Origin: b.Origin, Stream: b.Stream, Base: b.Base, Acked: b.Acked, Entries: make([]*replpb.Entry, len(b.Entries)),
		SentUnixNanos: sentNs}
	for i := range b.Entries {
		e := &b.Entries[i]
		out.Entries[i] = &replpb.Entry{OriginSeq: e.OriginSeq, PublishMs: e.PublishMs, Data: e.Data, Skip: e.Skip,
			OriginId:           &replpb.MessageId{Ledger: e.OriginID.Ledger, Entry: e.OriginID.Entry, Batch: e.OriginID.Batch},
			PersistedUnixNanos: e.Stamps.Persisted}
	}
	return out
}

// BatchFromProto is the batch p carries, received at receivedNs (Unix
// ns; 0 unknown); every entry's Origin is the batch's, and its Stamps the
// origin's persistence, the batch's send and its receipt.
func BatchFromProto(p *replpb.Batch, receivedNs int64) replicator.Batch {
	b := replicator.Batch{ID: p.Id, Origin: p.Origin, Stream: p.Stream, Base: p.Base, Acked: p.Acked, Entries: make([]replicator.Entry, len(p.Entries))}
	for i, e := range p.Entries {
		id := e.GetOriginId()
		b.Entries[i] = replicator.Entry{Origin: p.Origin, OriginSeq: e.OriginSeq, PublishMs: e.PublishMs, Data: e.Data, Skip: e.Skip,
			OriginID: replicator.MessageID{Ledger: id.GetLedger(), Entry: id.GetEntry(), Batch: id.GetBatch()},
			Stamps:   replicator.Stamps{Persisted: e.PersistedUnixNanos, Sent: p.SentUnixNanos, Received: receivedNs}}
	}
	return b
}

// AckToProto is a on the wire.
func AckToProto(a replicator.Ack) *replpb.Ack {
	return &replpb.Ack{Origin: a.Origin, BatchId: a.BatchID, Stream: a.Stream, Through: a.Through, ResendFrom: a.ResendFrom, Regressed: a.Regressed}
}

// AckFromProto is the ack p carries.
func AckFromProto(p *replpb.Ack) replicator.Ack {
	return replicator.Ack{Origin: p.Origin, BatchID: p.BatchId, Stream: p.Stream, Through: p.Through, ResendFrom: p.ResendFrom, Regressed: p.Regressed}
}
