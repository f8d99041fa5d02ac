package replication

import (
	"context"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/replicator"
)

// Resync: a new stream after retention trimmed what a region lacks.

// resync restarts replication to the remote region as a new stream from
// the first entry still retained, after retention trimmed entries the
// region never received (the namespace's default backlog-quota policy:
// keep data up to retention, then resync). The target adopts the new
// stream and logs the skipped sequence numbers as declared loss; the
// alert needs-resync was counted.
func (rs *replSender) resync() {
	ctx, cancel := context.WithTimeout(rs.ctx, 30*time.Second)
	defer cancel()
	st := rs.s.Status()
	eff := rs.t.policies().Effective()
	eff.StartAt = meta.StartAtEarliest
	start, err := rs.tlog.Start(ctx, eff)
	if err != nil {
		rs.log.Warn("replication resync: cannot find the first retained entry", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
		return
	}
	next := st.Cursor.NextStream(start.Pos, start.Seq, start.Bytes)
	s, err := replicator.NewSender(rs.t.senderConfig(rs.remote, eff), next, rs.clock.Now())
	if err != nil {
		rs.log.Warn("replication resync", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
		return
	}
	rs.tlog.SaveCursor(next)
	if err := rs.tlog.FlushCursor(ctx); err != nil {
		rs.log.Warn("replication resync: cursor not persisted", "topic", rs.t.name.String(), "remote", rs.remote, "err", err)
		return
	}
	rs.closeStream()
	rs.s = s
	rs.s.Appended(rs.tlog.End()) // replicator's step 1: at once, or it waits for an input
	rs.log.Warn("replication resynced: a new stream from the first retained entry (the region lacks what retention trimmed)",
		"topic", rs.t.name.String(), "remote", rs.remote, "from_seq", next.Base+1, "stream", next.Stream)
}
