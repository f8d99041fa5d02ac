package broker

import (
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"time"

	"github.com/meridian-mq/meridian/cluster"
)

// Bundle split and load balancing, run by the policy loop:
//
//   - Split: a bundle this broker owns that holds more than
//     BundleSplitTopics loaded topics is split in two at the middle of its
//     hash range. The new boundaries are written by compare-and-swap, the
//     halves acquired under this broker's lease, then the parent released;
//     topics stay loaded. A half another broker acquired first has its
//     topics closed here (clients look up again).
//   - Balance: a broker owning more than one bundle more than the least
//     loaded live broker hands one bundle (its fewest-topics one) to that
//     broker: topics closed with the new owner's address
//     (assignedBrokerServiceUrl), bundle released. One move per round.

func (b *Broker) maintainBundles(ctx context.Context) {
	if b.own == nil {
		return
	}
	byBundle := map[string][]*Topic{}
	for _, t := range b.loadedTopics() {
		byBundle[t.bundle.key()] = append(byBundle[t.bundle.key()], t)
	}
	for _, bd := range b.own.ownedBundles() {
		if ts := byBundle[bd.key()]; b.cfg.BundleSplitTopics > 0 && len(ts) > b.cfg.BundleSplitTopics {
			b.split(ctx, bd, ts)
			return // one change per round; counts are re-read next round
		}
	}
	b.balance(ctx, byBundle)
}

func (b *Broker) split(ctx context.Context, bd bundle, topics []*Topic) {
	if bd.upper-bd.lower < 2 {
		return
	}
	pol, err := b.meta.GetPolicies(ctx, bd.ns)
	if err != nil {
		return
	}
	bs, rev, err := b.boundaries(ctx, bd.ns, pol)
	if err != nil {
		return
	}
	idx := -1
	for i := 0; i+1 < len(bs); i++ {
		if bs[i] == bd.lower {
			idx = i
		}
	}
	if idx < 0 {
		return // boundaries moved under us
	}
	mid := bd.lower + (bd.upper-bd.lower)/2 + 1
	next := append(append(append([]uint32{}, bs[:idx+1]...), mid), bs[idx+1:]...)
	v, _ := json.Marshal(next)
	if _, err := b.cfg.Store.CAS(ctx, "/bundles/"+bd.ns, v, rev); err != nil {
		if !errors.Is(err, cluster.ErrVersionMismatch) {
			b.log.Warn("bundle split", "bundle", bd.String(), "err", err)
		}
		return
	}
	halves := []bundle{{ns: bd.ns, lower: bd.lower, upper: mid - 1}, {ns: bd.ns, lower: mid, upper: bd.upper}}
	mine := map[int]bool{}
	for i, h := range halves {
		ok, _, err := b.own.acquire(ctx, h)
		mine[i] = ok && err == nil
	}
	if err := b.own.release(ctx, bd); err != nil {
		b.log.Warn("bundle split: release parent", "bundle", bd.String(), "err", err)
	}
	b.log.Info("bundle split", "bundle", bd.String(), "topics", len(topics), "at", mid)
	for _, t := range topics {
		h := crc32.ChecksumIEEE([]byte(t.name.String()))
		for i, half := range halves {
			if !half.contains(h) {
				continue
			}
			if mine[i] {
				t.mu.Lock()
				t.bundle = half
				t.mu.Unlock()
			} else {
				t.close(ctx)
			}
		}
	}
}

func (b *Broker) balance(ctx context.Context, byBundle map[string][]*Topic) {
	brokers, err := b.own.brokers(ctx)
	if err != nil || len(brokers) < 2 {
		return
	}
	kvs, _, err := b.cfg.Store.List(ctx, "/ownership/")
	if err != nil {
		return
	}
	load := map[string]int{}
	for _, bi := range brokers {
		load[bi.ID] = 0
	}
	for _, kv := range kvs {
		var bi BrokerInfo
		if json.Unmarshal(kv.Value, &bi) == nil {
			if _, live := load[bi.ID]; live {
				load[bi.ID]++
			}
		}
	}
	var target BrokerInfo
	least := -1
	for _, bi := range brokers {
		if bi.ID != b.cfg.BrokerID && (least < 0 || load[bi.ID] < least) {
			target, least = bi, load[bi.ID]
		}
	}
	if least < 0 || load[b.cfg.BrokerID] <= least+1 {
		return
	}
	owned := b.own.ownedBundles()
	if len(owned) == 0 {
		return
	}
	pick := owned[0]
	for _, bd := range owned[1:] {
		if len(byBundle[bd.key()]) < len(byBundle[pick.key()]) {
			pick = bd
		}
	}
	b.log.Info("moving a bundle to a less loaded broker", "bundle", pick.String(), "to", target.ID, "topics", len(byBundle[pick.key()]))
	b.moveBundle(ctx, pick, byBundle[pick.key()], &target)
}

// moveBundle unloads a bundle's topics, releases the bundle, and only then
// points their clients at target. The bundle is released even when an
// unload fails or does not finish within ctx: holding it would leave the
// topics without an owner that serves them until this broker's lease
// expires (and, on shutdown, the lease lives until the process exits).
// That loses nothing: sends stopped being accepted when the unload began,
// and the next owner's open fences the managed ledger's last ledger,
// keeping every entry acknowledged.
func (b *Broker) moveBundle(ctx context.Context, bd bundle, topics []*Topic, target *BrokerInfo) {
	var notify []func(*BrokerInfo)
	for _, t := range topics {
		n, finish := t.beginUnload()
		notify = append(notify, n)
		if finish == nil {
			continue // closed already
		}
		done := make(chan error, 1)
		go func() { done <- finish(ctx) }()
		select {
		case err := <-done:
			if err != nil {
				b.log.Warn("unload", "topic", t.name.String(), "err", err)
			}
		case <-ctx.Done():
			b.log.Warn("unload did not finish in time; releasing the bundle anyway (the next owner fences the ledger)", "topic", t.name.String(), "err", ctx.Err())
		}
	}
	rctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
	}
	if target != nil {
		b.own.handOff(bd, *target) // not taken back here meanwhile
	}
	if err := b.own.release(rctx, bd); err != nil {
		b.log.Warn("release", "bundle", bd.String(), "err", err)
	}
	for _, n := range notify {
		n(target)
	}
	b.np.close(func(t *npTopic) bool { return t.inBundle(bd) }, target)
}

// releaseTimeout bounds a bundle's release once the context of the move
// has ended (its unloads used it up).
const releaseTimeout = 5 * time.Second
