package replication

import (
	"context"
	"strings"

	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/replicator"
)

// The replicator's durable cursor on a topic's log (meridian.repl.REGION):
// its properties and where a new one starts.

const (
	replCursorPrefix = "meridian.repl."
	propSeq          = "seq"
	propBytes        = "bytes"
	propStream       = "stream"
	propBase         = "base"
)

func isReplCursor(name string) bool { return strings.HasPrefix(name, replCursorPrefix) }

// IsCursor reports whether a cursor of a topic's log is a replicator's
// (meridian.repl.REGION), not a subscription's.
func IsCursor(name string) bool { return isReplCursor(name) }

// CursorSeq is the local sequence number a replicator's cursor records
// as passed (0 for another cursor): it may be past what retention kept of
// the log, so a topic loading takes it into account.
func CursorSeq(props map[string]int64) uint64 {
	if n := props[propSeq]; n > 0 {
		return uint64(n)
	}
	return 0
}

func toReplPos(p mledger.Position) replicator.Position {
	if p.Ledger < 0 {
		return replicator.Earliest
	}
	return replicator.Position{Ledger: p.Ledger, Entry: p.Entry}
}

func toMLPos(p replicator.Position) mledger.Position {
	if p == replicator.Earliest {
		return mledger.Earliest
	}
	return mledger.Position{Ledger: p.Ledger, Entry: p.Entry}
}

func cursorProps(c replicator.Cursor) map[string]int64 {
	return map[string]int64{propSeq: int64(c.Seq), propBytes: c.Bytes, propStream: int64(c.Stream), propBase: int64(c.Base)}
}

// initialReplCursor is where a new replicator starts: after the log's end
// (start-at latest) or before the first retained entry (earliest, the
// default: a new region gets the whole retained history).
func (t *Topic) initialReplCursor(ctx context.Context, eff meta.ReplicationPolicy) (replicator.Cursor, error) {
	last, seq, bytes := t.log.End()
	if eff.StartAt == "latest" {
		return replicator.InitialCursor(toReplPos(last), seq, bytes), nil
	}
	first := t.ml.FirstPosition()
	if t.ml.LastConfirmed().Less(first) || seq == 0 {
		return replicator.InitialCursor(replicator.Earliest, 0, 0), nil
	}
	// The first retained local entry's number tells where the retained
	// sequence starts; with none retained, the next local entry is seq+1.
	before := seq
	from := first
	for range 20 {
		es, err := t.ml.ReadEntries(ctx, from, 500, 8<<20)
		if err != nil {
			return replicator.Cursor{}, err
		}
		found := false
		for _, e := range es {
			if d, err := entry.Decode(e.Data); err == nil && d.Origin.Region == "" && d.Origin.Seq > 0 {
				before, found = d.Origin.Seq-1, true
				break
			}
		}
		if found || len(es) == 0 {
			break
		}
		from = t.ml.Next(es[len(es)-1].Pos)
	}
	var b int64
	if seq > 0 {
		b = bytes * int64(before) / int64(seq)
	}
	return replicator.InitialCursor(replicator.Position{Ledger: first.Ledger, Entry: first.Entry - 1}, before, b), nil
}
