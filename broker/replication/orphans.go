package replication

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/replicator"
)

// Orphans: the async tail of a failover. Messages the old active region
// acknowledged and had not replicated when the namespace moved reach the
// new active region only when the old one returns; by then the new region
// has served other messages, so they arrive late and out of order. The
// namespace's orphans policy says what happens to them: replicate (the
// default: appended to the topic, late) or quarantine (appended to a
// topic TOPIC-orphans for an operator; the topic's own log only advances
// the origin's sequence past them). Either way they are never dropped
// silently, and never reordered without a record: the new active region's
// applier recognises them (an entry whose origin is the record's previous
// region, applied while this region is active after an unplanned move,
// published before the failover) and records each batch of them in the
// global store,
//
//	/failover/orphans/TENANT/NS/EPOCH/TOPIC/FIRST-ORIGIN-SEQ
//
// with their origin ids, origin sequence numbers, publish times and the
// quarantine topic if any. A crash between the quarantine append and the
// applier's acknowledgement makes the batch arrive again and be kept
// aside twice (listed twice too): never lost.
// `meridian admin failover orphans TENANT/NS` lists them; the counter
// meridian_broker_failover_orphans_total counts them.

const orphansKey = "/failover/orphans/"

// Orphan is one late message.
type Orphan struct {
	OriginID  string `json:"originId"` // ledger:entry in the origin region
	OriginSeq uint64 `json:"originSeq"`
	PublishMs int64  `json:"publishMs"`
	// QuarantineID is where the quarantine topic holds it (ledger:entry;
	// "" when not quarantined, or recorded by an older version).
	QuarantineID string `json:"quarantineId,omitempty"`
	// RepublishedID is its new message id in the topic once republished
	// (ledger:entry, republish.go), RepublishedMs when; "": not (yet).
	RepublishedID string `json:"republishedId,omitempty"`
	RepublishedMs int64  `json:"republishedMs,omitempty"`
}

// OrphanBatch is the orphans of one applied batch.
type OrphanBatch struct {
	Namespace  string `json:"namespace"`
	Topic      string `json:"topic"`
	Origin     string `json:"origin"`
	Epoch      uint64 `json:"epoch"`
	FailoverMs int64  `json:"failoverMs"` // when the failover was committed
	AppliedMs  int64  `json:"appliedMs"`  // when they arrived here
	// Quarantine is the topic they were kept aside in; "" when they were
	// appended to Topic (replicated late).
	Quarantine string   `json:"quarantine,omitempty"`
	Orphans    []Orphan `json:"orphans"`
}

// orphanRecord returns the namespace's failover record when entries
// arriving now from its previous active region may be orphans: this
// region is active after an unplanned move (a planned one, CatchUp, waits
// for the old region's tail before serving: nothing arrives late).
func (t *Topic) orphanRecord() (meta.FailoverRecord, bool) {
	pol := t.policies()
	if !meta.ActiveStandby(pol) {
		return meta.FailoverRecord{}, false
	}
	rec := t.svc.active.Record(t.name.NamespaceName(), pol)
	ok := rec.Active == t.svc.cfg.Cluster && rec.Previous != "" && rec.Previous != rec.Active && !rec.CatchUp
	return rec, ok
}

// findOrphans returns the indexes of the orphans among entries: every
// entry of the previous active region's that arrives while this region
// is active after an unplanned move, whenever it was published. Not only
// what it published before the move (rec.SinceMs): an old active region
// that is alive serves on until it learns of the new epoch (a forced
// failover: ~170 ms in TestRepublishQuarantinedOrphansOnce), and what it
// accepted then is as late, and as much a duplicate of what its client
// sent again to this region, as the tail before the move. Comparing with
// SinceMs also compared two regions' clocks.
func findOrphans(rec meta.FailoverRecord, entries []replicator.Entry) []int {
	var out []int
	for i, e := range entries {
		if !e.Skip && e.Origin == rec.Previous {
			out = append(out, i)
		}
	}
	return out
}

// recordOrphans lists the orphans among entries (the indexes idx) in the
// global store; quarantine names the topic they were kept aside in ("":
// replicated late).
// qpos: where the quarantine topic holds each (nil: not quarantined).
func (t *Topic) recordOrphans(rec meta.FailoverRecord, entries []replicator.Entry, idx []int, quarantine string, qpos []mledger.Position) {
	if len(idx) == 0 {
		return
	}
	ns := t.name.NamespaceName()
	ob := OrphanBatch{Namespace: ns, Topic: t.name.String(), Origin: rec.Previous, Epoch: rec.Epoch, FailoverMs: rec.SinceMs,
		AppliedMs: time.Now().UnixMilli(), Quarantine: quarantine}
	for k, i := range idx {
		e := entries[i]
		o := Orphan{OriginID: fmt.Sprintf("%d:%d", e.OriginID.Ledger, e.OriginID.Entry), OriginSeq: e.OriginSeq, PublishMs: e.PublishMs}
		if k < len(qpos) {
			o.QuarantineID = fmt.Sprintf("%d:%d", qpos[k].Ledger, qpos[k].Entry)
		}
		ob.Orphans = append(ob.Orphans, o)
	}
	t.svc.metrics.Orphans.Add(float64(len(ob.Orphans)))
	how := "replicated late"
	if quarantine != "" {
		how = "kept aside in " + quarantine
	}
	t.svc.log.Warn("failover: orphans of the async tail "+how, "topic", ob.Topic, "origin", ob.Origin, "epoch", ob.Epoch, "count", len(ob.Orphans))
	v, _ := json.Marshal(ob)
	key := fmt.Sprintf("%s%s/%d/%s/%020d", orphansKey, ns, ob.Epoch, url.PathEscape(ob.Topic), ob.Orphans[0].OriginSeq)
	for attempt := 0; attempt < 5; attempt++ {
		ctx, cancel := context.WithTimeout(t.svc.ctx, 5*time.Second)
		_, err := t.svc.cfg.GlobalStore.Put(ctx, key, v)
		cancel()
		if err == nil || t.svc.ctx.Err() != nil {
			return
		}
		t.svc.log.Warn("failover: orphans not recorded yet; retrying", "topic", ob.Topic, "err", err)
		time.Sleep(time.Second)
	}
}

// quarantine appends the orphans (entries[idx]) to the topic's quarantine
// topic, as the messages they are (their producer's name and sequence
// ids kept), waits until every one is persisted and returns where each
// is (in idx's order). The quarantine topic
// is TOPIC-orphans, or TOPIC-orphans-N for the first N that falls in the
// same bundle, so this broker owns it too.
func (t *Topic) quarantine(ctx context.Context, entries []replicator.Entry, idx []int) (string, []mledger.Position, error) {
	name, err := t.quarantineName(ctx)
	if err != nil {
		return "", nil, err
	}
	pos, err := t.svc.host.Quarantine(ctx, name, entries, idx)
	if err != nil {
		return "", nil, err
	}
	return name, pos, nil
}

func (t *Topic) quarantineName(ctx context.Context) (string, error) {
	for n := 0; n < 256; n++ {
		q := t.name
		q.Local = t.name.Local + "-orphans"
		if n > 0 {
			q.Local += fmt.Sprintf("-%d", n)
		}
		q.Partition = -1
		in, err := t.log.InBundle(ctx, q)
		if err != nil {
			return "", err
		}
		if in {
			return q.String(), nil
		}
	}
	return "", fmt.Errorf("no quarantine topic name for %s falls in its bundle", t.name)
}

// orphans lists a namespace's recorded orphan batches, oldest epoch and
// lowest sequence first.
func (svc *Service) orphans(ctx context.Context, ns string) ([]OrphanBatch, error) {
	kvs, _, err := svc.cfg.GlobalStore.List(ctx, orphansKey+ns+"/")
	if err != nil {
		return nil, err
	}
	out := []OrphanBatch{}
	for _, kv := range kvs {
		var ob OrphanBatch
		if json.Unmarshal(kv.Value, &ob) == nil {
			out = append(out, ob)
		}
	}
	slices.SortStableFunc(out, func(a, b OrphanBatch) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return out, nil
}
