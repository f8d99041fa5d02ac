package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/failoverctl"
	"github.com/meridian-mq/meridian/broker/meta"
)

// A planned switchover's hold on this broker (broker/failoverctl/
// switchover.go is the protocol): while a namespace is held, its
// producers' sends wait unanswered in arrival order (Topic.gateSend) and
// its subscriptions dispatch nothing; the coordinator polls readiness,
// then ends the hold — aborted (the sends are appended, dispatch resumes)
// or moved (the record is taken first, the sends dropped unanswered for
// their clients to resend in the new active region, and the clients
// closed). A hold whose coordinator went silent ends by itself at its
// deadline: moved if the record no longer names this region, else
// aborted. A moved hold ends early when the namespace is active here
// again at a later epoch (switched back within its 10 s: activeAt), or
// when a new switchover holds the namespace here.

type switchHolds struct {
	b  *Broker
	mu sync.Mutex
	m  map[string]*switchHold // by namespace
}

type switchHold struct {
	failoverctl.Hold
	moved bool // the namespace moved: sends are dropped
	// movedEpoch: the epoch of the record the namespace moved away with.
	movedEpoch uint64
	timer      *time.Timer // the deadline's
}

// holdOf returns namespace ns's hold: held, and whether it moved.
func (sw *switchHolds) holdOf(ns string) (held, moved bool) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	h := sw.m[ns]
	if h == nil {
		return false, false
	}
	return true, h.moved
}

// gateSend decides on a producer's send: false lets it through (counted
// in admitting); true means it was queued behind a hold, or dropped
// (do(true)) when the namespace moved.
func (t *Topic) gateSend(do func(drop bool)) bool {
	// The hold is read under mu: a readiness read (under mu too) after
	// the hold was set sees every send this let through.
	t.mu.Lock()
	ns := t.name.NamespaceName()
	held, moved := t.b.sw.holdOf(ns)
	if moved && t.b.sw.activeAt(ns, t.b.fo.Record(ns, t.pol)) {
		// Switched back here since: the record this broker holds names
		// this region at a later epoch (the producer was admitted on it),
		// so the send is taken, not dropped.
		held, moved = false, false
	}
	if moved {
		t.mu.Unlock()
		do(true)
		return true
	}
	if held || t.rpoHeld || t.replaying || len(t.heldSends) > 0 {
		t.heldSends = append(t.heldSends, do)
		t.mu.Unlock()
		return true
	}
	t.admitting.Add(1)
	t.mu.Unlock()
	return false
}

// releaseSends hands every held send to do(drop), in order, with the
// sends that arrive meanwhile (they queue behind: replaying).
func (t *Topic) releaseSends(drop bool) {
	for {
		t.mu.Lock()
		q := t.heldSends
		if t.rpoHeld && !drop {
			// The RPO budget holds them still (rpogate.go): its gate
			// releases them when it opens.
			t.replaying = false
			t.mu.Unlock()
			return
		}
		t.heldSends = nil
		if len(q) == 0 {
			t.replaying = false
			t.mu.Unlock()
			return
		}
		t.replaying = true
		t.mu.Unlock()
		for _, f := range q {
			f(drop)
		}
	}
}

// setPaused holds or resumes the dispatch of every subscription, and
// returns the entries dispatched and not acknowledged.
func (t *Topic) setPaused(paused bool) (unacked int) {
	for _, s := range t.subscriptions() {
		s.mu.Lock()
		was := s.paused
		s.paused = paused
		unacked += s.core.Pending()
		s.mu.Unlock()
		if was && !paused {
			s.wake()
		}
	}
	return unacked
}

// hold holds namespace ns on this broker.
func (sw *switchHolds) hold(ns string, h failoverctl.Hold) error {
	b := sw.b
	if h.ID == "" || h.DeadlineMs <= 0 {
		return meta.BadRequest(errors.New("a hold needs an id and a deadline"))
	}
	wait := time.Until(time.UnixMilli(h.DeadlineMs))
	if wait <= 0 || wait > 10*time.Minute {
		return meta.BadRequest(fmt.Errorf("hold deadline %d: want within the next 10 minutes", h.DeadlineMs))
	}
	sw.mu.Lock()
	if sw.m == nil {
		sw.m = map[string]*switchHold{}
	}
	if cur := sw.m[ns]; cur != nil && cur.ID != h.ID && !cur.moved {
		// (A moved hold is replaced: a new switchover runs here, so the
		// namespace is active here again.)
		sw.mu.Unlock()
		return meta.StatusError{Status: http.StatusConflict, Err: fmt.Errorf("namespace %s is held by switchover %s already", ns, cur.ID)}
	}
	sh := &switchHold{Hold: h}
	sh.timer = time.AfterFunc(wait, func() { sw.expired(ns, h.ID) })
	if cur := sw.m[ns]; cur != nil {
		cur.timer.Stop()
	}
	sw.m[ns] = sh
	sw.mu.Unlock()
	for _, t := range b.loadedTopics() {
		if t.name.NamespaceName() == ns {
			t.setPaused(true)
		}
	}
	b.log.Warn("switchover: namespace held", "namespace", ns, "id", h.ID, "target", h.Target, "deadline", time.UnixMilli(h.DeadlineMs))
	return nil
}

// expired ends a hold its coordinator did not end.
func (sw *switchHolds) expired(ns, id string) {
	b := sw.b
	var rec *meta.FailoverRecord
	if pol, err := b.meta.LookupPolicies(b.ctx, ns); err == nil {
		if r := b.fo.Record(ns, pol); r.Active != b.cfg.Cluster {
			rec = &r
		}
	}
	b.log.Warn("switchover: hold ended by its deadline", "namespace", ns, "id", id, "moved", rec != nil)
	sw.release(ns, id, rec)
}

// release ends hold id of namespace ns (see
// failoverctl.Host.SwitchoverRelease).
func (sw *switchHolds) release(ns, id string, rec *meta.FailoverRecord) {
	b := sw.b
	sw.mu.Lock()
	h := sw.m[ns]
	if h == nil || h.ID != id {
		sw.mu.Unlock()
		return
	}
	h.timer.Stop()
	if rec != nil {
		h.moved, h.movedEpoch = true, rec.Epoch
		// Kept a little, so a send still in a connection's buffer is
		// dropped rather than appended here; the record (taken below)
		// then refuses new producers.
		h.timer = time.AfterFunc(10*time.Second, func() {
			sw.mu.Lock()
			if sw.m[ns] == h {
				delete(sw.m, ns)
			}
			sw.mu.Unlock()
		})
	} else {
		delete(sw.m, ns)
	}
	sw.mu.Unlock()
	if rec != nil {
		// The record first: no client closed below may be sent back here.
		b.fo.Committed(*rec)
		// Unless it was switched back already (this release came late).
		sw.activeAt(ns, b.fo.Record(ns, meta.Policies{}))
	}
	for _, t := range b.loadedTopics() {
		if t.name.NamespaceName() != ns {
			continue
		}
		t.releaseSends(rec != nil)
		t.setPaused(false)
		if rec != nil {
			f := failoverTopic{t}
			f.CloseProducers()
			f.CloseConsumers()
		}
	}
	b.log.Warn("switchover: hold released", "namespace", ns, "id", id, "moved", rec != nil)
}

// activeAt ends namespace ns's moved hold if rec, a record this broker
// took, makes this region active at a later epoch than the one the
// namespace moved away with: switched back within the moved hold's 10 s,
// its producers' sends must be appended here, not dropped unanswered
// (they timed out at the client's send timeout). It reports whether it
// ended one. Called as the record is taken (failoverHost.ActiveHere) and,
// for a send that raced that, by gateSend.
func (sw *switchHolds) activeAt(ns string, rec meta.FailoverRecord) bool {
	if rec.Active != sw.b.cfg.Cluster {
		return false
	}
	sw.mu.Lock()
	h := sw.m[ns]
	if h == nil || !h.moved || rec.Epoch <= h.movedEpoch {
		sw.mu.Unlock()
		return false
	}
	h.timer.Stop()
	delete(sw.m, ns)
	sw.mu.Unlock()
	sw.b.log.Warn("switchover: moved hold ended: the namespace is active here again", "namespace", ns, "id", h.ID, "moved_epoch", h.movedEpoch, "epoch", rec.Epoch)
	return true
}

// readiness reports the readiness of this broker's loaded
// topics of ns to move to target.
func (sw *switchHolds) readiness(ctx context.Context, ns, target string, dry bool) []failoverctl.TopicReadiness {
	b := sw.b
	held, _ := sw.holdOf(ns)
	out := []failoverctl.TopicReadiness{}
	for _, t := range b.loadedTopics() {
		if t.name.NamespaceName() != ns {
			continue
		}
		r := failoverctl.TopicReadiness{Topic: t.name.String(), Broker: b.cfg.BrokerID, Held: held && !dry}
		if r.Held {
			r.Unacked = t.setPaused(true) // a subscription made since the hold
		} else {
			for _, s := range t.subscriptions() {
				s.mu.Lock()
				r.Unacked += s.core.Pending()
				s.mu.Unlock()
			}
		}
		t.mu.Lock()
		r.HeldSends, r.InFlight = len(t.heldSends), int(t.admitting.Load())
		t.mu.Unlock()
		t.seqMu.Lock()
		last := t.nextSeq
		t.seqMu.Unlock()
		d := t.repl.DrainedTo(ctx, target, last)
		r.Connected, r.BacklogEntries, r.BacklogBytes, r.SecondsBehind, r.Subscriptions = d.Connected, d.BacklogEntries, d.BacklogBytes, d.SecondsBehind, d.Subscriptions
		if d.SecondsBehind > 0 {
			r.OldestUnreplicated = time.Now().Add(-time.Duration(d.SecondsBehind * float64(time.Second))).UTC().Format(time.RFC3339Nano)
		}
		switch {
		case dry:
			r.Ready, r.Reason = d.Drained, d.Reason
		case !held:
			r.Reason = "not held"
		case r.InFlight > 0:
			r.Reason = fmt.Sprintf("%d sends admitted before the hold not answered yet", r.InFlight)
		case r.Unacked > 0:
			r.Reason = fmt.Sprintf("%d dispatched entries not acknowledged yet", r.Unacked)
		default:
			r.Ready, r.Reason = d.Drained, d.Reason
		}
		out = append(out, r)
	}
	return out
}

// The Host side: every broker of the region, this one directly and the
// others through their admin APIs (…/switchover/{hold,release,readiness}
// with local=true).

func (h failoverHost) SwitchoverHold(ctx context.Context, ns string, hold failoverctl.Hold) error {
	if err := h.b.sw.hold(ns, hold); err != nil {
		return err
	}
	return h.b.sw.eachPeer(ctx, http.MethodPost, ns, "hold", nil, hold, nil)
}

func (h failoverHost) ActiveHere(ns string, rec meta.FailoverRecord) {
	h.b.sw.activeAt(ns, rec)
}

func (h failoverHost) SwitchoverRelease(ctx context.Context, ns, id string, rec *meta.FailoverRecord) error {
	h.b.sw.release(ns, id, rec)
	return h.b.sw.eachPeer(ctx, http.MethodPost, ns, "release", nil, SwitchoverRelease{ID: id, Record: rec}, nil)
}

func (h failoverHost) SwitchoverReadiness(ctx context.Context, ns, target string, dry bool) ([]failoverctl.TopicReadiness, error) {
	out := h.b.sw.readiness(ctx, ns, target, dry)
	q := url.Values{"target": {target}}
	if dry {
		q.Set("dryRun", "true")
	}
	err := h.b.sw.eachPeer(ctx, http.MethodGet, ns, "readiness", q, nil, func(body []byte) error {
		var more []failoverctl.TopicReadiness
		if err := json.Unmarshal(body, &more); err != nil {
			return err
		}
		out = append(out, more...)
		return nil
	})
	return out, err
}

// SwitchoverRelease is the body of a release.
type SwitchoverRelease struct {
	ID     string               `json:"id"`
	Record *meta.FailoverRecord `json:"record,omitempty"`
}

// eachPeer calls every other broker of the region at
// /admin/v2/meridian/failover/NS/switchover/WHAT?local=true; a broker that
// does not answer is an error (a hold must hold everywhere).
func (sw *switchHolds) eachPeer(ctx context.Context, method, ns, what string, q url.Values, body any, read func([]byte) error) error {
	b := sw.b
	peers, err := b.own.brokers(ctx)
	if err != nil {
		return err
	}
	if q == nil {
		q = url.Values{}
	}
	q.Set("local", "true")
	var errs []error
	for _, p := range peers {
		if p.ID == b.cfg.BrokerID || p.AdminURL == "" {
			continue
		}
		var rd io.Reader
		if body != nil {
			v, _ := json.Marshal(body)
			rd = bytes.NewReader(v)
		}
		req, err := http.NewRequestWithContext(ctx, method, p.AdminURL+"/admin/v2/meridian/failover/"+ns+"/switchover/"+what+"?"+q.Encode(), rd)
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := sw.peerHTTP(3 * time.Second).Do(req)
		if err != nil {
			errs = append(errs, fmt.Errorf("broker %s: %w", p.ID, err))
			continue
		}
		v, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			errs = append(errs, fmt.Errorf("broker %s: %d %s", p.ID, resp.StatusCode, bytes.TrimSpace(v)))
			continue
		}
		if read != nil {
			if err := read(v); err != nil {
				errs = append(errs, fmt.Errorf("broker %s: %w", p.ID, err))
			}
		}
	}
	return errors.Join(errs...)
}

// peerHTTP is the client for other brokers' admin APIs.
func (sw *switchHolds) peerHTTP(timeout time.Duration) *http.Client {
	b := sw.b
	if b.guard != nil {
		return b.guard.PeerHTTP(timeout)
	}
	return &http.Client{Timeout: timeout}
}
