package broker

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/meridian-mq/meridian/broker/admin"
	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/pierrec/lz4/v4"
)

// The admin API's cursor and message operations on a loaded topic:
// create a subscription at a position, reset to a message id, skip,
// expire, peek, a message by id, the last message id, the id at a time.
// Message ids are the ids clients know (a replicated entry keeps its
// origin's, Topic.wireID) and map back through Topic.localPos.

// position maps an admin message id to a local position.
func (t *Topic) position(id admin.MessageID) mledger.Position {
	switch {
	case id.Earliest():
		return mledger.Earliest
	case id.Latest():
		return mledger.Latest
	}
	return t.localPos(mledger.Position{Ledger: id.LedgerID, Entry: id.EntryID})
}

func (t *Topic) messageID(p mledger.Position) admin.MessageID {
	return admin.MessageID{LedgerID: p.Ledger, EntryID: p.Entry, PartitionIndex: max(t.name.Partition, -1)}
}

// createSubscription creates a durable subscription whose first message
// is at (Earliest, Latest or a message id).
func (t *Topic) createSubscription(ctx context.Context, name string, at admin.MessageID) error {
	if err := meta.ValidSubscription(name); err != nil {
		return meta.BadRequest(err)
	}
	if t.subscription(name) != nil {
		return fmt.Errorf("%w: subscription %s", meta.ErrAlreadyExists, name)
	}
	cur, err := t.ml.OpenCursor(ctx, name, t.position(at))
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subs[name] == nil {
		t.subs[name] = newSubscription(t, name, 0, cur, true)
		t.b.metrics.subscriptions.Inc()
	}
	return nil
}

func (t *Topic) adminSubscription(name string) (*Subscription, error) {
	s := t.subscription(name)
	if s == nil {
		return nil, fmt.Errorf("%w: Subscription %s not found for topic %s", meta.ErrNotFound, name, t.name)
	}
	return s, nil
}

// nthUnacked returns the position of the nth (from 1) entry after the
// cursor's mark-delete position that is not acknowledged; ok is false
// past the last entry.
func (t *Topic) nthUnacked(c *mledger.Cursor, n int64) (mledger.Position, bool) {
	last := t.ml.LastConfirmed()
	if len(c.AckedRanges()) == 0 {
		// No holes: count with the ledgers' entry counts.
		if n > c.Backlog() {
			return last, false
		}
		return t.advance(c.MarkDeleted(), n), true
	}
	p := c.MarkDeleted()
	for n > 0 {
		p = t.ml.Next(p)
		if last.Less(p) {
			return last, false
		}
		if !c.IsAcked(p) {
			n--
		}
	}
	return p, true
}

// skip acknowledges the first n unacknowledged entries (n < 0: all).
func (t *Topic) skip(s *Subscription, n int64) {
	target := t.ml.LastConfirmed()
	if n >= 0 {
		target, _ = t.nthUnacked(s.cursor, n)
		if n == 0 {
			return
		}
	}
	s.cursor.AckCumulative(target)
	s.forgetThrough(target)
	s.afterAck()
}

// storedEntry reads and decodes the entry at p.
func (t *Topic) storedEntry(ctx context.Context, p mledger.Position) (entry.Decoded, error) {
	es, err := t.ml.ReadEntries(ctx, p, 1, 0)
	if err != nil {
		return entry.Decoded{}, err
	}
	if len(es) == 0 || es[0].Pos != p {
		return entry.Decoded{}, fmt.Errorf("%w: message %s of %s", meta.ErrNotFound, idString(p), t.name)
	}
	return entry.Decode(es[0].Data)
}

// storedMessage reads the entry at p as the admin API shows it.
func (t *Topic) storedMessage(ctx context.Context, p mledger.Position) (admin.Message, error) {
	d, err := t.storedEntry(ctx, p)
	if err != nil {
		return admin.Message{}, err
	}
	md, payload, err := entry.MessageParts(d.Msg)
	if err != nil {
		return admin.Message{}, err
	}
	payload, err = uncompress(md, payload)
	if err != nil {
		return admin.Message{}, err
	}
	m := admin.Message{ID: t.messageID(t.wireID(p, d)), PublishMs: int64(md.GetPublishTime()), BrokerPublishMs: d.PublishMs,
		EventTimeMs: int64(md.GetEventTime()), Key: md.GetPartitionKey(), ProducerName: md.GetProducerName(),
		SequenceID: int64(md.GetSequenceId()), Payload: payload, Properties: map[string]string{}}
	for _, kv := range md.Properties {
		m.Properties[kv.GetKey()] = kv.GetValue()
	}
	if md.NumMessagesInBatch != nil {
		m.BatchSize = int(md.GetNumMessagesInBatch())
	}
	return m, nil
}

// uncompress returns a message's payload uncompressed, as Pulsar's peek
// answers it.
func uncompress(md *pb.MessageMetadata, payload []byte) ([]byte, error) {
	size := int(md.GetUncompressedSize())
	bad := func(err error) error {
		return meta.StatusError{Status: http.StatusPreconditionFailed, Err: fmt.Errorf("message compressed with %s: %v", md.GetCompression(), err)}
	}
	if size < 0 || size > 64<<20 {
		return nil, bad(fmt.Errorf("uncompressed size %d", size))
	}
	switch md.GetCompression() {
	case pb.CompressionType_NONE:
		return payload, nil
	case pb.CompressionType_LZ4:
		out := make([]byte, size)
		n, err := lz4.UncompressBlock(payload, out)
		if err != nil {
			return nil, bad(err)
		}
		return out[:n], nil
	case pb.CompressionType_ZLIB:
		r, err := zlib.NewReader(bytes.NewReader(payload))
		if err != nil {
			return nil, bad(err)
		}
		out, err := io.ReadAll(io.LimitReader(r, int64(size)+1))
		if err != nil {
			return nil, bad(err)
		}
		return out, nil
	case pb.CompressionType_ZSTD:
		d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(uint64(size)+1))
		if err != nil {
			return nil, bad(err)
		}
		defer d.Close()
		out, err := d.DecodeAll(payload, make([]byte, 0, size))
		if err != nil {
			return nil, bad(err)
		}
		return out, nil
	case pb.CompressionType_SNAPPY:
		out, err := snappy.Decode(nil, payload)
		if err != nil {
			return nil, bad(err)
		}
		return out, nil
	}
	return nil, bad(errors.New("unknown compression"))
}

// adminTopic's cursor and message operations (admin.Topic).

func (a adminTopic) CreateSubscription(ctx context.Context, name string, at admin.MessageID) error {
	return a.t.createSubscription(ctx, name, at)
}

func (a adminTopic) ResetCursorTo(ctx context.Context, sub string, id admin.MessageID) error {
	s, err := a.t.adminSubscription(sub)
	if err != nil {
		return err
	}
	if err := s.seekTo(ctx, a.t.position(id), false); err != nil {
		return err
	}
	s.closeConsumers(nil)
	return nil
}

func (a adminTopic) Skip(ctx context.Context, sub string, n int64) error {
	s, err := a.t.adminSubscription(sub)
	if err != nil {
		return err
	}
	a.t.skip(s, n)
	return nil
}

func (a adminTopic) Expire(ctx context.Context, sub string, seconds int64) error {
	cutoff := time.Now().Add(-time.Duration(seconds) * time.Second).UnixMilli()
	if sub == "" {
		for _, s := range a.t.subscriptions() {
			a.t.expire(ctx, s, cutoff)
		}
		return nil
	}
	s, err := a.t.adminSubscription(sub)
	if err != nil {
		return err
	}
	a.t.expire(ctx, s, cutoff)
	return nil
}

func (a adminTopic) Peek(ctx context.Context, sub string, nth int) (admin.Message, error) {
	s, err := a.t.adminSubscription(sub)
	if err != nil {
		return admin.Message{}, err
	}
	p, ok := a.t.nthUnacked(s.cursor, int64(nth))
	if !ok {
		return admin.Message{}, fmt.Errorf("%w: subscription %s of %s has fewer than %d messages", meta.ErrNotFound, sub, a.t.name, nth)
	}
	return a.t.storedMessage(ctx, p)
}

func (a adminTopic) Message(ctx context.Context, id admin.MessageID) (admin.Message, error) {
	if id.Earliest() || id.Latest() || id.EntryID < 0 {
		return admin.Message{}, fmt.Errorf("%w: message %d:%d of %s", meta.ErrNotFound, id.LedgerID, id.EntryID, a.t.name)
	}
	return a.t.storedMessage(ctx, a.t.position(id))
}

func (a adminTopic) LastMessageID() admin.MessageID {
	_, wire := a.t.lastIDs()
	return a.t.messageID(wire)
}

func (a adminTopic) MessageIDAt(ctx context.Context, ms int64) (admin.MessageID, error) {
	p, err := a.t.findByPublishTime(ctx, ms)
	if err != nil {
		return admin.MessageID{}, err
	}
	if a.t.ml.LastConfirmed().Less(p) {
		return admin.MessageID{}, fmt.Errorf("%w: no message of %s was published at or after %d", meta.ErrNotFound, a.t.name, ms)
	}
	d, err := a.t.storedEntry(ctx, p)
	if err != nil {
		return admin.MessageID{}, err
	}
	return a.t.messageID(a.t.wireID(p, d)), nil
}

func (a adminTopic) Unload(ctx context.Context) error { return a.t.close(ctx) }
