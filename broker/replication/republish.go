package replication

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
)

// Republishing orphans: `meridian admin failover orphans TENANT/NS
// --republish [--topic T]` (POST .../orphans/republish) appends the
// quarantined orphans of the namespace to their topics, once each, in
// the current epoch. A broker of the active region answers (409
// elsewhere); each topic's owner appends (the call is forwarded to it).
//
// Each orphan is read from where the quarantine topic holds it
// (Orphan.QuarantineID) and appended as a new entry: a new message id,
// issued now, so above every id a consumer acknowledged (an old id would
// sort below later acknowledgements and the Go client would drop it as a
// duplicate); the properties PropOriginID, PropOriginRegion and
// PropOriginProducer say what it was. Once.
//
//  1. The orphans of a topic and origin are appended in origin sequence
//     order, by the producer name RepublishProducer(origin) with the
//     sequence id RepublishSeq(originSeq): the idempotence key is the
//     origin id, carried by the topic's own deduplication state, which is
//     persisted with the topic (its snapshot and log) and rebuilt by any
//     broker that loads it. An orphan whose sequence id is at or below
//     that producer's last persisted one was appended already: it is not
//     appended again (Host.Republish), whatever the namespace's
//     deduplication policy.
//     An orphan its own producer sent again to this region after the
//     move is not appended either (ResentError): the old active region
//     accepted it before it learned of the new epoch and the move
//     swallowed its receipt, so the client sent it again. The topic
//     holds that copy when its deduplication state remembers an entry of
//     the orphan's producer name and sequence id whose message is the
//     orphan's (entry.SameMessage) — positive evidence only: an orphan
//     whose producer's later messages are in the topic but not it (the
//     old region had acknowledged it, so the client did not send it
//     again) is appended, and so is one whose copy the state no longer
//     remembers (a duplicate then, at worst).
//  2. Only after its append is persisted, the orphan's record in the
//     global store gets its new id (Orphan.RepublishedID), by
//     compare-and-swap. A later call skips what the records say was
//     republished; a crash between 1 and 2 leaves the record without the
//     id, and the next call finds the entry through 1 and records it.
//  3. A failed orphan stops its topic's run (the next call takes it up
//     again): an orphan appended after it would make it look appended
//     (1). An orphan that cannot be republished at all (its quarantine
//     entry trimmed by retention, a chunk of a chunked message, a record
//     of an older version with no quarantine position) is reported and
//     passed over.

// The properties a republished message carries (on each message of a
// batch; on a compressed or encrypted batch, on the entry: entry.Republish).
const (
	PropOriginID       = "meridian-origin-id"       // ledger:entry (ledger:entry:index in a batch of several)
	PropOriginRegion   = "meridian-origin-region"   // the region that accepted it first
	PropOriginProducer = "meridian-origin-producer" // its producer's name there
)

// RepublishProducer is the producer name of the orphans of origin put
// back in their topic.
func RepublishProducer(origin string) string { return "meridian-republish-" + origin }

// republishSeqShift spaces the republished sequence ids so that a batch
// of up to 2^20 messages (seq .. seq+n-1) never reaches the next origin
// sequence number's.
const republishSeqShift = 20

// RepublishSeq is the sequence id an orphan of origin sequence number
// originSeq is republished with.
func RepublishSeq(originSeq uint64) (int64, error) {
	if originSeq == 0 || originSeq >= 1<<(63-republishSeqShift) {
		return 0, fmt.Errorf("origin sequence number %d: out of the republishable range", originSeq)
	}
	return int64(originSeq) << republishSeqShift, nil
}

// RepublishRequest is one orphan to append again (Host.Republish).
type RepublishRequest struct {
	Topic      string
	Quarantine string           // the quarantine topic
	At         mledger.Position // where Quarantine holds it
	Origin     string           // the region that accepted it
	OriginID   string           // ledger:entry there
	OriginSeq  uint64
}

// RepublishReport answers a republish call.
type RepublishReport struct {
	Namespace string `json:"namespace"`
	// Epoch is the namespace's epoch the new ids were issued in.
	Epoch uint64 `json:"epoch"`
	// Republished: appended by this call; Already: by an earlier one;
	// NotRepublished: left (each says why).
	Republished    int                `json:"republished"`
	Already        int                `json:"already"`
	NotRepublished int                `json:"notRepublished"`
	Orphans        []RepublishOutcome `json:"orphans"`
}

// RepublishOutcome is one orphan in a RepublishReport.
type RepublishOutcome struct {
	Topic     string `json:"topic"`
	OriginID  string `json:"originId"`
	OriginSeq uint64 `json:"originSeq"`
	// State: "republished" (now), "already" (earlier), "not republished".
	State  string `json:"state"`
	NewID  string `json:"newId,omitempty"`
	Reason string `json:"reason,omitempty"`
}

const (
	stateRepublished    = "republished"
	stateAlready        = "already"
	stateNotRepublished = "not republished"
)

// storedBatch is an orphan record with its key and revision.
type storedBatch struct {
	key string
	rev int64
	ob  OrphanBatch
}

// republishItem is one orphan to republish: the first record listing it
// (the records holding it twice, kept aside twice, all get its new id).
type republishItem struct {
	Origin     string
	Orphan     Orphan
	Quarantine string
	keys       []string // the records that list it
}

// planRepublish returns, per topic (sorted), the quarantined orphans of
// batches to republish in the order they must be appended (by origin,
// then origin sequence number), each once; topic "" takes every topic.
func planRepublish(batches []storedBatch, topic string) map[string][]republishItem {
	byTopic := map[string]map[string]*republishItem{} // topic → origin/seq → item
	for _, b := range batches {
		if b.ob.Quarantine == "" || (topic != "" && b.ob.Topic != topic) {
			continue // replicated late: in the topic already
		}
		m := byTopic[b.ob.Topic]
		if m == nil {
			m = map[string]*republishItem{}
			byTopic[b.ob.Topic] = m
		}
		for _, o := range b.ob.Orphans {
			k := b.ob.Origin + "/" + strconv.FormatUint(o.OriginSeq, 10)
			if it := m[k]; it != nil {
				it.keys = append(it.keys, b.key)
				if it.Orphan.RepublishedID == "" && o.RepublishedID != "" {
					it.Orphan.RepublishedID = o.RepublishedID
				}
				if it.Orphan.QuarantineID == "" {
					it.Orphan.QuarantineID, it.Quarantine = o.QuarantineID, b.ob.Quarantine
				}
				continue
			}
			m[k] = &republishItem{Origin: b.ob.Origin, Orphan: o, Quarantine: b.ob.Quarantine, keys: []string{b.key}}
		}
	}
	out := map[string][]republishItem{}
	for t, m := range byTopic {
		items := make([]republishItem, 0, len(m))
		for _, it := range m {
			items = append(items, *it)
		}
		slices.SortFunc(items, func(a, b republishItem) int {
			return cmp.Or(strings.Compare(a.Origin, b.Origin), cmp.Compare(a.Orphan.OriginSeq, b.Orphan.OriginSeq))
		})
		out[t] = items
	}
	return out
}

// markRepublished sets the new ids of done (origin/seq → id) on the
// orphans of ob not marked yet, and reports whether it changed any.
func markRepublished(ob *OrphanBatch, done map[string]string, at int64) bool {
	changed := false
	for i := range ob.Orphans {
		o := &ob.Orphans[i]
		id, ok := done[ob.Origin+"/"+strconv.FormatUint(o.OriginSeq, 10)]
		if ok && o.RepublishedID == "" {
			o.RepublishedID, o.RepublishedMs = id, at
			changed = true
		}
	}
	return changed
}

// parsePosition reads "ledger:entry".
func parsePosition(s string) (mledger.Position, error) {
	l, e, ok := strings.Cut(s, ":")
	if ok {
		li, err1 := strconv.ParseInt(l, 10, 64)
		ei, err2 := strconv.ParseInt(e, 10, 64)
		if err1 == nil && err2 == nil && li >= 0 && ei >= 0 {
			return mledger.Position{Ledger: li, Entry: ei}, nil
		}
	}
	return mledger.Position{}, fmt.Errorf("message id %q: want ledger:entry", s)
}

// RepublishOrphans republishes the quarantined orphans of namespace ns
// (of topic only, if not ""); see above.
func (svc *Service) RepublishOrphans(ctx context.Context, ns, topic string) (RepublishReport, error) {
	rep := RepublishReport{Namespace: ns, Orphans: []RepublishOutcome{}}
	if topic != "" {
		tn, err := meta.ParseTopic(topic)
		if err != nil {
			return rep, meta.BadRequest(err)
		}
		if tn.NamespaceName() != ns {
			return rep, meta.BadRequest(fmt.Errorf("topic %s is not in namespace %s", topic, ns))
		}
		topic = tn.String()
	}
	pol, err := svc.cfg.Meta.GetPolicies(ctx, ns)
	if err != nil {
		return rep, err
	}
	if !meta.ActiveStandby(pol) {
		return rep, meta.BadRequest(fmt.Errorf("namespace %s is not active-standby over several regions: it has no orphans", ns))
	}
	rec := svc.active.Record(ns, pol)
	rep.Epoch = rec.Epoch
	if rec.Active != svc.cfg.Cluster || svc.active.ActiveRegion(ns, pol) != svc.cfg.Cluster {
		return rep, meta.StatusError{Status: http.StatusConflict, Err: fmt.Errorf("namespace %s is active in region %s (epoch %d): orphans are republished there (this broker is in %s); ask a broker of %s",
			ns, rec.Active, rec.Epoch, svc.cfg.Cluster, rec.Active)}
	}
	svc.republishMu.Lock()
	defer svc.republishMu.Unlock()
	batches, err := svc.storedOrphans(ctx, ns)
	if err != nil {
		return rep, err
	}
	plan := planRepublish(batches, topic)
	for _, t := range slices.Sorted(maps.Keys(plan)) {
		outs, err := svc.republishTopic(ctx, t, plan[t])
		var no meta.NotOwnerError
		switch {
		case errors.As(err, &no) && topic != "":
			return rep, err // the admin API redirects to the owner
		case errors.As(err, &no):
			outs, err = svc.republishAt(ctx, no.OwnerAdminURL, ns, t)
		}
		if err != nil {
			outs = outs[:0]
			for _, it := range plan[t] {
				outs = append(outs, RepublishOutcome{Topic: t, OriginID: it.Orphan.OriginID, OriginSeq: it.Orphan.OriginSeq, State: stateNotRepublished, Reason: err.Error()})
			}
		}
		rep.Orphans = append(rep.Orphans, outs...)
	}
	for _, o := range rep.Orphans {
		switch o.State {
		case stateRepublished:
			rep.Republished++
		case stateAlready:
			rep.Already++
		default:
			rep.NotRepublished++
		}
	}
	return rep, nil
}

// storedOrphans lists the namespace's orphan records with their keys and
// revisions.
func (svc *Service) storedOrphans(ctx context.Context, ns string) ([]storedBatch, error) {
	kvs, _, err := svc.cfg.GlobalStore.List(ctx, orphansKey+ns+"/")
	if err != nil {
		return nil, err
	}
	var out []storedBatch
	for _, kv := range kvs {
		var ob OrphanBatch
		if json.Unmarshal(kv.Value, &ob) == nil {
			out = append(out, storedBatch{key: kv.Key, rev: kv.ModRevision, ob: ob})
		}
	}
	return out, nil
}

// republishTopic republishes items (one topic's, in order) on this
// broker. Its only error is meta.NotOwnerError (the topic is another
// broker's), before anything was appended here; the rest is per orphan.
func (svc *Service) republishTopic(ctx context.Context, topic string, items []republishItem) ([]RepublishOutcome, error) {
	var outs []RepublishOutcome
	done := map[string]string{} // origin/seq → new id, to record
	var stop error
	appended := 0
	for _, it := range items {
		o := RepublishOutcome{Topic: topic, OriginID: it.Orphan.OriginID, OriginSeq: it.Orphan.OriginSeq}
		switch {
		case it.Orphan.RepublishedID != "":
			o.State, o.NewID = stateAlready, it.Orphan.RepublishedID
			if len(it.keys) > 1 { // listed twice: mark the other record too
				done[it.Origin+"/"+strconv.FormatUint(it.Orphan.OriginSeq, 10)] = it.Orphan.RepublishedID
			}
		case stop != nil:
			o.State, o.Reason = stateNotRepublished, "not tried: an earlier orphan of the topic failed: "+stop.Error()
		case it.Orphan.QuarantineID == "":
			o.State, o.Reason = stateNotRepublished, "no quarantine position recorded (kept aside by an older version): read it from "+it.Quarantine+" by hand"
		default:
			at, err := parsePosition(it.Orphan.QuarantineID)
			var pos mledger.Position
			var already bool
			if err == nil {
				pos, already, err = svc.host.Republish(ctx, RepublishRequest{Topic: topic, Quarantine: it.Quarantine, At: at,
					Origin: it.Origin, OriginID: it.Orphan.OriginID, OriginSeq: it.Orphan.OriginSeq})
			}
			var no meta.NotOwnerError
			var resent ResentError
			switch {
			case errors.As(err, &no) && appended == 0:
				return nil, err // the owner takes the whole topic
			case errors.As(err, &resent):
				o.State, o.NewID, o.Reason = stateAlready, fmt.Sprintf("%d:%d", resent.At.Ledger, resent.At.Entry), resent.Error()
				done[it.Origin+"/"+strconv.FormatUint(it.Orphan.OriginSeq, 10)] = o.NewID
			case errors.Is(err, ErrNotRepublishable):
				o.State, o.Reason = stateNotRepublished, err.Error()
			case err != nil:
				stop = err
				o.State, o.Reason = stateNotRepublished, err.Error()
			case already && pos.Ledger < 0:
				o.State, o.Reason = stateAlready, "appended by an earlier call that did not record it; its new id is no longer remembered"
			default:
				appended++
				o.State, o.NewID = stateRepublished, fmt.Sprintf("%d:%d", pos.Ledger, pos.Entry)
				if already {
					o.State = stateAlready // appended by a call that did not record it
				}
				done[it.Origin+"/"+strconv.FormatUint(it.Orphan.OriginSeq, 10)] = o.NewID
			}
		}
		outs = append(outs, o)
	}
	if len(done) > 0 {
		if err := svc.recordRepublished(ctx, items, done); err != nil {
			// Appended and persisted, not recorded: the next call finds
			// them by the topic's deduplication state and records them.
			svc.log.Warn("failover: republished orphans not recorded yet", "topic", topic, "err", err)
			for i := range outs {
				if outs[i].State == stateRepublished {
					outs[i].Reason = "appended; its record in the global store not updated yet (the next call does): " + err.Error()
				}
			}
		}
		svc.log.Warn("failover: orphans republished", "topic", topic, "count", len(done))
	}
	return outs, nil
}

// ResentError is Host.Republish's answer for an orphan its own producer
// sent again to this region after the move, which the topic holds (At):
// an entry the old active region accepted before it learned of the new
// epoch, whose receipt the move swallowed, so the client sent it again
// (issue 32). Republishing it would put the message in the topic twice.
// It is reported "already", with At as its id, and recorded as such.
type ResentError struct {
	At       mledger.Position
	Producer string
	Seq      int64
}

func (e ResentError) Error() string {
	return fmt.Sprintf("its producer %q sent it again to this region after the move (sequence id %d): the topic holds that copy at %d:%d", e.Producer, e.Seq, e.At.Ledger, e.At.Entry)
}

// ErrNotRepublishable marks an orphan that cannot be republished at all
// (Host.Republish wraps it): reported and passed over.
var ErrNotRepublishable = errors.New("replication: orphan cannot be republished")

// recordRepublished sets the new ids in the records listing them, each
// by compare-and-swap (read again on a conflict).
func (svc *Service) recordRepublished(ctx context.Context, items []republishItem, done map[string]string) error {
	keys := map[string]bool{}
	for _, it := range items {
		if _, ok := done[it.Origin+"/"+strconv.FormatUint(it.Orphan.OriginSeq, 10)]; ok {
			for _, k := range it.keys {
				keys[k] = true
			}
		}
	}
	now := time.Now().UnixMilli()
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			var kv cluster.KV
			if kv, err = svc.cfg.GlobalStore.Get(ctx, k); err != nil {
				break
			}
			var ob OrphanBatch
			if err = json.Unmarshal(kv.Value, &ob); err != nil {
				break
			}
			if !markRepublished(&ob, done, now) {
				break
			}
			v, _ := json.Marshal(ob)
			if _, err = svc.cfg.GlobalStore.CAS(ctx, k, v, kv.ModRevision); !errors.Is(err, cluster.ErrVersionMismatch) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("orphan record %s: %w", k, err)
		}
	}
	return nil
}

// republishAt asks the broker at adminURL (the topic's owner) to
// republish the topic's orphans.
func (svc *Service) republishAt(ctx context.Context, adminURL, ns, topic string) ([]RepublishOutcome, error) {
	if svc.cfg.PeerHTTP == nil {
		return nil, fmt.Errorf("%s is served by the broker at %s: republish with --topic there", topic, adminURL)
	}
	u := adminURL + "/admin/v2/meridian/failover/" + ns + "/orphans/republish?authoritative=true&topic=" + url.QueryEscape(topic)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := svc.cfg.PeerHTTP(25 * time.Second).Do(req)
	if err != nil {
		return nil, fmt.Errorf("the topic's owner %s: %w", adminURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Reason string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return nil, fmt.Errorf("the topic's owner %s answered %d: %s", adminURL, resp.StatusCode, e.Reason)
	}
	var r RepublishReport
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("the topic's owner %s: %w", adminURL, err)
	}
	return r.Orphans, nil
}
