package replication

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/replicator"
)

// Status of the senders, for the admin API and metrics.

// Status is what admin and metrics show of a sender.
type Status struct {
	Topic          string  `json:"topic"`
	Remote         string  `json:"remote"`
	Connected      bool    `json:"connected"`
	Target         string  `json:"target,omitempty"`
	BacklogEntries int64   `json:"backlogEntries"`
	BacklogBytes   int64   `json:"backlogBytes"`
	SecondsBehind  float64 `json:"secondsBehind"`
	AckedSeq       uint64  `json:"ackedSeq"`
	LocalSeq       uint64  `json:"localSeq"`
	Inflight       int     `json:"inflightBatches"`
	OverQuota      bool    `json:"overQuota"`
	NeedsResync    string  `json:"needsResync,omitempty"`
	LastError      string  `json:"lastError,omitempty"`
	// StreamBase is the base of the current replication stream (sequence
	// numbers at or below it are not carried to the remote: startAt
	// latest, or a resync's declared loss).
	StreamBase uint64 `json:"streamBase"`
	// VerifiedAt is when the background verifier last compared this
	// region's entries of the topic with the remote's (nil: never since
	// the topic loaded), VerifyMissing and VerifyMismatched what it
	// found.
	VerifiedAt       *time.Time `json:"verifiedAt,omitempty"`
	VerifyMissing    uint64     `json:"verifyMissing"`
	VerifyMismatched uint64     `json:"verifyMismatched"`
	// MsgRateOut and MsgThroughputOut: entries and payload bytes a second
	// sent to the remote region, as the broker's stats rates are
	// (internal/ratemeter); at the time of the read.
	MsgRateOut       float64 `json:"msgRateOut"`
	MsgThroughputOut float64 `json:"msgThroughputOut"`
	// MsgRateIn and MsgThroughputIn: entries and payload bytes a second
	// of the remote region's origin persisted here (the topic's applier
	// for that origin), as Pulsar's replication.<cluster>.msgRateIn; 0
	// when nothing arrives. An origin the namespace no longer replicates
	// to has no sender here, so no Status: not shown, as in Pulsar,
	// whose inbound rates sit on the outbound replicator's stats.
	MsgRateIn       float64 `json:"msgRateIn"`
	MsgThroughputIn float64 `json:"msgThroughputIn"`
	// MsgInCounter and BytesInCounter: entries and payload bytes of the
	// remote region's origin persisted here since the topic loaded.
	MsgInCounter   int64 `json:"msgInCounter"`
	BytesInCounter int64 `json:"bytesInCounter"`

	// asOf is when the sender published it: SecondsBehind grows from
	// then on until the next (a sender asleep publishes nothing).
	asOf time.Time
}

// publishStatus publishes the sender's status as of now, and sets or
// clears the backlog marker to match it.
func (rs *replSender) publishStatus(now time.Time) {
	s := rs.s.Status()
	st := &Status{
		Topic: rs.t.name.String(), Remote: rs.remote, Connected: rs.st != nil,
		BacklogEntries: s.Backlog.Entries, BacklogBytes: s.Backlog.Bytes, SecondsBehind: s.Backlog.Age.Seconds(),
		AckedSeq: s.Acked, Inflight: s.InflightBatches, OverQuota: s.OverQuota, StreamBase: s.Cursor.Base, asOf: now,
	}
	if rs.st != nil {
		st.Target = rs.st.addr
	}
	if s.NeedsResync != replicator.ResyncNone {
		st.NeedsResync = s.NeedsResync.String()
	}
	if e := rs.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	st.LocalSeq = rs.tlog.End().Seq
	rs.status.Store(st)
	rs.tlog.HoldRetention(s.HoldsRetention)
	// A backlog marker in the region's store lets a broker that owns the
	// topic later load it to replicate even if no client ever comes back.
	// Cleared only after the remote region has been caught up for a while
	// (an idle topic), set again at the first entry behind: a crash in the
	// moment between a new entry and the marker's write is the one case a
	// client (or a stream) must load the topic again.
	behind := st.AckedSeq < st.LocalSeq
	if behind {
		rs.caughtUp = time.Time{}
	} else if rs.caughtUp.IsZero() {
		rs.caughtUp = now
	}
	if !behind && now.Sub(rs.caughtUp) < markerIdle {
		behind = rs.marked // keep it for now
	}
	rs.markerRetry = time.Time{}
	if behind != rs.marked {
		ctx, cancel := context.WithTimeout(rs.ctx, 5*time.Second)
		err := rs.tlog.SetBacklogged(ctx, behind)
		cancel()
		if err == nil {
			rs.marked = behind
		} else {
			rs.markerRetry = now.Add(statusEvery)
		}
	}
}

// markerAt is when publishStatus must run again for the backlog marker:
// to retry a failed write of it, or to clear it once the region has been
// caught up for markerIdle (zero: no need).
func (rs *replSender) markerAt() time.Time {
	switch {
	case !rs.markerRetry.IsZero():
		return rs.markerRetry
	case rs.marked && !rs.caughtUp.IsZero():
		return rs.caughtUp.Add(markerIdle)
	}
	return time.Time{}
}

// markerDue reports whether the backlog marker needs publishStatus now.
func (rs *replSender) markerDue(now time.Time) bool {
	at := rs.markerAt()
	return !at.IsZero() && !now.Before(at)
}

// replicationStatus lists the senders of the loaded topics, optionally of
// one namespace or topic.
func (svc *Service) replicationStatus(filter string) []Status {
	var out []Status
	for _, t := range svc.host.Topics() {
		name := t.name.String()
		if filter != "" && name != filter && t.name.NamespaceName() != filter && !strings.HasPrefix(name, filter+"-partition-") {
			continue
		}
		out = append(out, t.senderStatus()...)
	}
	slices.SortFunc(out, func(a, b Status) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return strings.Compare(a.Remote, b.Remote)
	})
	return out
}

// Status returns the status of the topic's senders, one per remote
// region it replicates to (none if it does not replicate), by region.
func (t *Topic) Status() []Status {
	if t == nil {
		return nil
	}
	out := t.senderStatus()
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Remote, b.Remote) })
	return out
}

// senderStatus returns the status the topic's senders last published,
// their SecondsBehind brought up to now.
func (t *Topic) senderStatus() []Status {
	t.mu.Lock()
	r := t.repl
	t.mu.Unlock()
	if r == nil {
		return nil
	}
	now := t.svc.clock.Now()
	t.verifyMu.Lock()
	verified := t.verified
	t.verifyMu.Unlock()
	var out []Status
	r.mu.Lock()
	for _, s := range r.senders {
		if st := s.status.Load(); st != nil {
			v := *st
			v.MsgRateOut, v.MsgThroughputOut = s.out.Rate(now)
			if a := r.appliers[v.Remote]; a != nil {
				v.MsgRateIn, v.MsgThroughputIn = a.in.Rate(now)
				v.MsgInCounter, v.BytesInCounter = a.in.Totals()
			}
			if v.SecondsBehind > 0 {
				// The oldest unacknowledged entry is as old as then,
				// plus the time since.
				v.SecondsBehind += max(0, now.Sub(v.asOf)).Seconds()
			}
			if res, ok := verified[v.Remote]; ok {
				at := res.at
				v.VerifiedAt, v.VerifyMissing, v.VerifyMismatched = &at, res.missing, res.mismatched
			}
			out = append(out, v)
		}
	}
	r.mu.Unlock()
	return out
}

// regionReplicationStatus is replicationStatus over every broker of the
// region (asked through their admin APIs).
func (svc *Service) regionReplicationStatus(ctx context.Context, filter string) ([]Status, error) {
	out := svc.replicationStatus(filter)
	if out == nil {
		out = []Status{}
	}
	peers, err := svc.host.Peers(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		if p.ID == svc.cfg.BrokerID || p.AdminURL == "" {
			continue
		}
		u := p.AdminURL + "/admin/v2/meridian/replication?local=true&filter=" + url.QueryEscape(filter)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		// A broker that just died stays registered until its lease
		// expires: skip what does not answer soon.
		resp, err := svc.cfg.PeerHTTP(3 * time.Second).Do(req)
		if err != nil {
			svc.log.Debug("replication status: broker did not answer", "broker", p.ID, "err", err)
			continue
		}
		var more []Status
		err = json.NewDecoder(resp.Body).Decode(&more)
		resp.Body.Close()
		if err != nil {
			svc.log.Debug("replication status: bad answer", "broker", p.ID, "err", err)
			continue
		}
		out = append(out, more...)
	}
	slices.SortFunc(out, func(a, b Status) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return strings.Compare(a.Remote, b.Remote)
	})
	return out, nil
}
