package replicator

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	flagSimSeed  = flag.Uint64("sim.seed", 0, "run the simulation with this seed only")
	flagSimSeeds = flag.Int("sim.seeds", 0, "how many seeds the simulation runs (default 300, 200 under -race, 50 with -short)")
)

// TestSimulationFullMesh is the requirement "at the end every region holds
// every origin's entries exactly once, in per-origin order, with no gap,
// and nothing loops", checked under a lossy network and crashes:
//
//   - 3 regions in a full mesh, producers active in every region;
//   - local logs that roll over (positions jump ledgers);
//   - a network that drops, duplicates, delays and reorders batches and
//     acks, cuts links for a while, and fails sends ambiguously (the
//     batch may still arrive);
//   - senders that crash (restart from the last persisted cursor, which
//     may lag), appliers that crash (restart from their record, with a
//     random prefix of their in-flight writes durable), and failing
//     writes on the target;
//   - sync trackers in every region (strict), whose receipts must never
//     run ahead of the remote records.
//
// Invariants are checked as the run goes (a cursor is emitted only over
// entries the target persisted; a batch holds only local entries; a
// region's log gets each origin's sequence numbers consecutively), and
// the final state after the faults stop.
func TestSimulationFullMesh(t *testing.T) {
	seeds := make([]uint64, 0, *flagSimSeeds)
	if *flagSimSeed != 0 {
		seeds = append(seeds, *flagSimSeed)
	} else {
		n := *flagSimSeeds
		switch {
		case n > 0:
		case testing.Short():
			n = 50
		case raceEnabled:
			n = 200
		default:
			n = 300
		}
		for i := range n {
			seeds = append(seeds, uint64(i)+1)
		}
	}
	// Two shards in parallel (the machines running CI have 2 cores).
	var mu sync.Mutex
	var total simStats
	t.Cleanup(func() {
		if !t.Failed() {
			t.Logf("%d seeds: %s", len(seeds), total)
		}
	})
	const shards = 2
	for sh := range shards {
		t.Run(fmt.Sprintf("shard%d", sh), func(t *testing.T) {
			t.Parallel()
			for i := sh; i < len(seeds); i += shards {
				st := runSim(t, seeds[i], randomSimOpts(seeds[i]), false)
				if t.Failed() {
					return
				}
				mu.Lock()
				total.add(st)
				mu.Unlock()
			}
		})
	}
}

type simOpts struct {
	regions       []string
	perRegion     int // entries each region's producers publish
	pProduce      float64
	pDrop, pDup   float64
	delayMin      time.Duration
	delayMax      time.Duration
	pSendFail     float64 // per batch: the transport reports a failure
	pSenderCrash  float64 // per sender per step
	pApplierCrash float64 // per applier per step
	pPersistFail  float64 // per write
	pRollover     float64 // per append
	pExclude      float64 // per local entry: ReplicateTo leaves one region out
	pCut          float64 // per link per step
	rateLimit     bool
	maxSteps      int
}

func randomSimOpts(seed uint64) simOpts {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	return simOpts{
		regions:       []string{"a", "b", "c"},
		perRegion:     40 + rng.IntN(100),
		pProduce:      0.2 + 0.6*rng.Float64(),
		pDrop:         0.2 * rng.Float64(),
		pDup:          0.1 * rng.Float64(),
		delayMin:      time.Millisecond,
		delayMax:      time.Duration(5+rng.IntN(120)) * time.Millisecond,
		pSendFail:     0.05 * rng.Float64(),
		pSenderCrash:  0.004 * rng.Float64(),
		pApplierCrash: 0.004 * rng.Float64(),
		pPersistFail:  0.05 * rng.Float64(),
		pRollover:     0.05 + 0.3*rng.Float64(),
		pExclude:      0.1 * rng.Float64(),
		pCut:          0.002 * rng.Float64(),
		rateLimit:     rng.IntN(4) == 0,
		maxSteps:      20000,
	}
}

const simStep = 10 * time.Millisecond

type timed[T any] struct {
	at   time.Time
	v    T
	fail bool // a write that will fail
}

type simCluster struct {
	t       testing.TB
	seed    uint64
	rng     *rand.Rand
	o       simOpts
	now     time.Time
	net     *simNet
	ledgers int64 // the global ledger-id allocator
	regions map[string]*simRegion
	names   []string
	faults  bool
	tracing bool // keep a trace of events (on a failing seed's rerun)
	trace   []string
	st      simStats
}

type simStats struct {
	steps, sent, dropped, dups, batches, resentEntries, senderCrashes, applierCrashes, persistFails, sendFails int
	gapNacks, dupEntries                                                                                       int
}

func (s *simStats) add(o simStats) {
	s.steps += o.steps
	s.sent += o.sent
	s.dropped += o.dropped
	s.dups += o.dups
	s.batches += o.batches
	s.resentEntries += o.resentEntries
	s.senderCrashes += o.senderCrashes
	s.applierCrashes += o.applierCrashes
	s.persistFails += o.persistFails
	s.sendFails += o.sendFails
	s.gapNacks += o.gapNacks
	s.dupEntries += o.dupEntries
}

func (s simStats) String() string {
	return fmt.Sprintf("steps=%d msgs=%d dropped=%d duplicated=%d batches=%d resent-entries=%d gap-nacks=%d duplicate-entries-dropped=%d sender-crashes=%d applier-crashes=%d persist-fails=%d send-fails=%d",
		s.steps, s.sent, s.dropped, s.dups, s.batches, s.resentEntries, s.gapNacks, s.dupEntries, s.senderCrashes, s.applierCrashes, s.persistFails, s.sendFails)
}

type simRegion struct {
	name       string
	log        []Entry
	localCount []uint64 // localCount[i]: local entries in log[:i+1]
	ledger     int64
	nextEntry  int64
	localSeq   uint64
	localBytes int64
	published  []Entry // the local entries as published, index seq-1
	// stored[origin]: the last OriginSeq of origin this log received
	// (placeholders included).
	stored   map[string]uint64
	senders  map[string]*senderNode  // by remote region
	appliers map[string]*applierNode // by origin region
	tracker  *SyncTracker
	receipts uint64
}

type senderNode struct {
	c       *simCluster
	r       *simRegion
	remote  string
	cfg     SenderConfig
	s       *Sender
	durable Cursor
	cursorQ []timed[Cursor]
	reads   []timed[ReadRequest]
	fails   []timed[uint64]
	sentMax uint64 // highest seq ever sent (to count resends)
}

type applierNode struct {
	c       *simCluster
	r       *simRegion
	origin  string
	a       *Applier
	durable State
	writes  []timed[*Write]
}

func (c *simCluster) logf(format string, args ...any) {
	if !c.tracing {
		return
	}
	c.trace = append(c.trace, fmt.Sprintf("%6dms ", c.now.Sub(simStart).Milliseconds())+fmt.Sprintf(format, args...))
	if len(c.trace) > 400 {
		c.trace = c.trace[len(c.trace)-300:]
	}
}

// fatalf fails the run. Runs go untraced (formatting every event costs
// more than the simulation itself); a failing seed is rerun with the trace
// on — the run is deterministic — and fails again, printing its last
// events.
func (c *simCluster) fatalf(format string, args ...any) {
	c.t.Helper()
	if !c.tracing {
		runSim(c.t, c.seed, c.o, true)
		c.t.Fatalf("seed %d failed (%s) but not when rerun with tracing: nondeterministic simulation", c.seed, fmt.Sprintf(format, args...))
	}
	c.t.Fatalf("seed %d (rerun: go test ./replicator/ -run TestSimulationFullMesh -sim.seed=%d): %s\nopts: %+v\nlast events:\n%s",
		c.seed, c.seed, fmt.Sprintf(format, args...), c.o, strings.Join(c.trace, "\n"))
}

var simStart = time.Unix(1_700_000_000, 0)

func newSimCluster(t testing.TB, seed uint64, o simOpts) *simCluster {
	rng := rand.New(rand.NewPCG(seed, 1))
	c := &simCluster{t: t, seed: seed, rng: rng, o: o, now: simStart, net: newSimNet(rng), regions: map[string]*simRegion{}, names: o.regions, faults: true}
	c.net.dropRate, c.net.dupRate, c.net.delayMin, c.net.delayMax = o.pDrop, o.pDup, o.delayMin, o.delayMax
	for _, name := range o.regions {
		c.ledgers += 1 + rng.Int64N(3)
		r := &simRegion{name: name, ledger: c.ledgers, stored: map[string]uint64{}, senders: map[string]*senderNode{}, appliers: map[string]*applierNode{}}
		var others []string
		for _, o := range o.regions {
			if o != name {
				others = append(others, o)
			}
		}
		r.tracker = NewSyncTracker(SyncConfig{Policy: SyncStrict, Timeout: time.Second}, others, 1, c.now)
		c.regions[name] = r
	}
	for _, name := range o.regions {
		r := c.regions[name]
		for _, other := range o.regions {
			if other == name {
				continue
			}
			cfg := DefaultSenderConfig(name, other)
			cfg.BatchMaxEntries = 1 + rng.IntN(8)
			cfg.BatchMaxBytes = 40 + rng.IntN(200)
			cfg.MaxInflightBatches = 1 + rng.IntN(4)
			cfg.MaxInflightBytes = 100 + rng.IntN(1000)
			cfg.AckTimeout = time.Duration(200+rng.IntN(400)) * time.Millisecond
			cfg.BackoffInitial = time.Duration(5+rng.IntN(30)) * time.Millisecond
			cfg.BackoffMax = time.Duration(100+rng.IntN(400)) * time.Millisecond
			if o.rateLimit {
				cfg.Limiter = NewTokenBucket(RateLimit{EntriesPerSecond: 200 + rng.Int64N(800), BytesPerSecond: 5000 + rng.Int64N(20000)}, c.now)
			}
			n := &senderNode{c: c, r: r, remote: other, cfg: cfg, durable: InitialCursor(Earliest, 0, 0)}
			n.start()
			r.senders[other] = n
			a, err := NewApplier(name, State{Origin: other})
			if err != nil {
				t.Fatal(err)
			}
			r.appliers[other] = &applierNode{c: c, r: r, origin: other, a: a, durable: a.State()}
		}
	}
	return c
}

func runSim(t testing.TB, seed uint64, o simOpts, tracing bool) simStats {
	t.Helper()
	c := newSimCluster(t, seed, o)
	c.tracing = tracing
	steps := 0
	for ; !c.producedAll(); steps++ {
		if steps > o.maxSteps {
			c.fatalf("producers did not finish in %d steps", steps)
		}
		c.step()
	}
	// Heal: no more faults; lost messages are recovered by timeouts.
	c.faults = false
	c.net.dropRate, c.net.cut = 0, map[[2]string]time.Time{}
	c.logf("--- faults stop")
	for !c.converged() {
		steps++
		if steps > o.maxSteps {
			c.fatalf("no convergence after %d steps:\n%s", steps, c.describe())
		}
		c.step()
	}
	c.checkFinal()
	c.st.steps = steps
	c.st.sent, c.st.dropped, c.st.dups = c.net.sent, c.net.dropped, c.net.duplicated
	return c.st
}

func (c *simCluster) producedAll() bool {
	for _, name := range c.names {
		if len(c.regions[name].published) < c.o.perRegion {
			return false
		}
	}
	return true
}

func (c *simCluster) step() {
	c.now = c.now.Add(simStep)
	// Producers.
	for _, name := range c.names {
		r := c.regions[name]
		if len(r.published) < c.o.perRegion && c.rng.Float64() < c.o.pProduce {
			for range 1 + c.rng.IntN(3) {
				c.produce(r)
			}
		}
	}
	// Network.
	for _, m := range c.net.due(c.now) {
		if m.batch != nil {
			c.regions[m.to].appliers[m.from].receive(m.batch)
		} else {
			c.regions[m.to].senders[m.from].acked(*m.ack)
		}
	}
	// I/O completions, faults, ticks.
	for _, name := range c.names {
		r := c.regions[name]
		for _, other := range c.names {
			if other == name {
				continue
			}
			r.appliers[other].completeWrites()
			r.senders[other].completeIO()
			if c.faults && c.rng.Float64() < c.o.pSenderCrash {
				r.senders[other].crash()
			}
			if c.faults && c.rng.Float64() < c.o.pApplierCrash {
				r.appliers[other].crash()
			}
			if c.faults && c.rng.Float64() < c.o.pCut {
				d := time.Duration(50+c.rng.IntN(2000)) * time.Millisecond
				c.net.cutLink(name, other, c.now.Add(d))
				c.logf("cut %s→%s for %v", name, other, d)
			}
		}
	}
	for _, name := range c.names {
		r := c.regions[name]
		for _, other := range c.names {
			if other != name {
				n := r.senders[other]
				n.s.Tick(c.now)
				n.pump()
			}
		}
		r.tracker.Tick(c.now)
		c.trackerReady(r)
	}
}

// append adds e to r's log at the next position (rolling over sometimes).
func (c *simCluster) append(r *simRegion, e Entry) Entry {
	if len(r.log) > 0 && c.rng.Float64() < c.o.pRollover {
		c.ledgers += 1 + c.rng.Int64N(5)
		r.ledger, r.nextEntry = c.ledgers, 0
	}
	e.Pos = Position{r.ledger, r.nextEntry}
	r.nextEntry++
	r.log = append(r.log, e)
	r.localCount = append(r.localCount, r.localSeq)
	for _, other := range c.names {
		if other != r.name {
			n := r.senders[other]
			n.s.Appended(LogEnd{Pos: e.Pos, Seq: r.localSeq, Bytes: r.localBytes})
			n.pump()
		}
	}
	return e
}

func (c *simCluster) produce(r *simRegion) {
	r.localSeq++
	data := []byte(fmt.Sprintf("%s-%d-%s", r.name, r.localSeq, strings.Repeat("x", c.rng.IntN(60))))
	r.localBytes += int64(len(data))
	e := Entry{Origin: r.name, OriginSeq: r.localSeq, Data: data, PublishMs: c.now.UnixMilli()}
	if c.rng.Float64() < c.o.pExclude {
		for _, o := range c.names {
			if o != r.name && c.rng.IntN(2) == 0 {
				continue
			}
			e.ReplicateTo = append(e.ReplicateTo, o)
		}
	}
	// The origin id is the local message id, known once appended.
	e = c.append(r, e)
	e.OriginID = MessageID{Ledger: e.Pos.Ledger, Entry: e.Pos.Entry}
	r.log[len(r.log)-1].OriginID = e.OriginID
	r.published = append(r.published, e)
	r.stored[r.name] = r.localSeq
	r.tracker.Track(r.localSeq, c.now)
	c.trackerReady(r)
}

func (c *simCluster) trackerReady(r *simRegion) {
	rd := r.tracker.Ready()
	if rd.ReceiptThrough == 0 {
		return
	}
	for _, other := range c.names {
		if other == r.name {
			continue
		}
		if through := c.regions[other].appliers[r.name].durable.Through; rd.ReceiptThrough > through {
			c.fatalf("%s receipted through %d but %s persisted only through %d", r.name, rd.ReceiptThrough, other, through)
		}
	}
	if rd.ReceiptThrough < r.receipts {
		c.fatalf("%s receipts went back from %d to %d", r.name, r.receipts, rd.ReceiptThrough)
	}
	r.receipts = rd.ReceiptThrough
}

// ---- sender node (the shell around a Sender) ----

func (n *senderNode) start() {
	s, err := NewSender(n.cfg, n.durable, n.c.now)
	if err != nil {
		n.c.t.Fatal(err)
	}
	n.s = s
	n.reads, n.fails, n.cursorQ = nil, nil, nil
	if len(n.r.log) > 0 {
		s.Appended(LogEnd{Pos: n.r.log[len(n.r.log)-1].Pos, Seq: n.r.localSeq, Bytes: n.r.localBytes})
	}
	n.pump()
}

func (n *senderNode) crash() {
	c := n.c
	c.st.senderCrashes++
	// A random prefix of the cursor writes in flight lands.
	k := c.rng.IntN(len(n.cursorQ) + 1)
	for _, q := range n.cursorQ[:k] {
		n.persisted(q.v)
	}
	c.logf("crash sender %s→%s; restart from %v", n.r.name, n.remote, n.durable)
	n.start()
}

func (n *senderNode) persisted(cur Cursor) {
	if cur.Pos.Less(n.durable.Pos) || cur.Seq < n.durable.Seq {
		n.c.fatalf("sender %s→%s cursor went back: %v after %v", n.r.name, n.remote, cur, n.durable)
	}
	n.durable = cur
}

func (n *senderNode) pump() {
	c := n.c
	for {
		rd := n.s.Ready()
		if rd.Read != nil {
			n.reads = append(n.reads, timed[ReadRequest]{at: c.now.Add(time.Duration(c.rng.IntN(20)) * time.Millisecond), v: *rd.Read})
		}
		for i := range rd.Send {
			n.send(&rd.Send[i])
		}
		if rd.Cursor != nil {
			n.checkCursor(*rd.Cursor)
			n.cursorQ = append(n.cursorQ, timed[Cursor]{at: c.now.Add(time.Duration(c.rng.IntN(30)) * time.Millisecond), v: *rd.Cursor})
		}
		for _, a := range rd.Alerts {
			c.fatalf("sender %s→%s: unexpected alert %v", n.r.name, n.remote, a)
		}
		n.r.tracker.Acked(n.remote, rd.Acked)
		c.trackerReady(n.r)
		if !n.s.HasReady() {
			return
		}
	}
}

// checkCursor: invariant 1, a cursor is emitted only over entries the
// target persisted, and its Seq matches its position in the log.
func (n *senderNode) checkCursor(cur Cursor) {
	c := n.c
	if through := c.regions[n.remote].appliers[n.r.name].durable.Through; cur.Seq > through {
		c.fatalf("sender %s→%s emitted cursor %v but the target persisted only through %d", n.r.name, n.remote, cur, through)
	}
	i := sort.Search(len(n.r.log), func(i int) bool { return cur.Pos.Less(n.r.log[i].Pos) })
	want := uint64(0)
	if i > 0 {
		want = n.r.localCount[i-1]
	}
	if cur.Seq != want {
		c.fatalf("sender %s→%s cursor %v: %d local entries up to its position", n.r.name, n.remote, cur, want)
	}
}

func (n *senderNode) send(b *Batch) {
	c := n.c
	c.st.batches++
	for i := range b.Entries {
		e := &b.Entries[i]
		if e.Origin != n.r.name || b.Origin != n.r.name {
			c.fatalf("loop: sender %s→%s sent an entry of origin %s", n.r.name, n.remote, e.Origin)
		}
		if e.OriginSeq <= n.sentMax {
			c.st.resentEntries++
		}
		n.sentMax = max(n.sentMax, e.OriginSeq)
	}
	c.logf("send %s→%s batch %d seq %d..%d acked=%d", n.r.name, n.remote, b.ID, b.FirstSeq(), b.LastSeq(), b.Acked)
	if c.faults && c.rng.Float64() < c.o.pSendFail {
		c.st.sendFails++
		n.fails = append(n.fails, timed[uint64]{at: c.now.Add(time.Duration(c.rng.IntN(50)) * time.Millisecond), v: b.ID})
		if c.rng.IntN(2) == 0 {
			return // lost; otherwise it still arrives
		}
	}
	c.net.send(c.now, simMsg{from: n.r.name, to: n.remote, batch: b})
}

func (n *senderNode) acked(a Ack) {
	n.c.logf("ack %s→%s %v", n.remote, n.r.name, a)
	n.s.Acked(a)
	n.pump()
}

func (n *senderNode) completeIO() {
	c := n.c
	for len(n.cursorQ) > 0 && !n.cursorQ[0].at.After(c.now) {
		n.persisted(n.cursorQ[0].v)
		n.cursorQ = n.cursorQ[1:]
	}
	var due []timed[ReadRequest]
	due, n.reads = splitDue(n.reads, c.now)
	for _, rq := range due {
		es := n.r.readAfter(rq.v)
		if err := n.s.Read(rq.v.ID, es); err != nil {
			c.fatalf("sender %s→%s read: %v", n.r.name, n.remote, err)
		}
		n.pump()
	}
	var dueF []timed[uint64]
	dueF, n.fails = splitDue(n.fails, c.now)
	for _, f := range dueF {
		n.s.SendFailed(f.v, fmt.Errorf("sim: connection reset"))
		n.pump()
	}
}

// splitDue returns the items due at now and the others.
func splitDue[T any](q []timed[T], now time.Time) (due, rest []timed[T]) {
	if !slices.ContainsFunc(q, func(x timed[T]) bool { return !x.at.After(now) }) {
		return nil, q
	}
	for _, x := range q {
		if x.at.After(now) {
			rest = append(rest, x)
		} else {
			due = append(due, x)
		}
	}
	return due, rest
}

func (r *simRegion) readAfter(rq ReadRequest) []Entry {
	i := sort.Search(len(r.log), func(i int) bool { return rq.After.Less(r.log[i].Pos) })
	var out []Entry
	bytes := 0
	for ; i < len(r.log) && len(out) < rq.MaxEntries; i++ {
		if len(out) > 0 && bytes+len(r.log[i].Data) > rq.MaxBytes {
			break
		}
		out = append(out, r.log[i])
		bytes += len(r.log[i].Data)
	}
	return out
}

// ---- applier node (the shell around an Applier) ----

func (n *applierNode) receive(b *Batch) {
	c := n.c
	res, err := n.a.Receive(*b)
	if err != nil {
		c.fatalf("applier %s<-%s: %v", n.r.name, n.origin, err)
	}
	c.logf("recv %s<-%s batch %d seq %d..%d: write=%v gap=%v dups=%d", n.r.name, n.origin, b.ID, b.FirstSeq(), b.LastSeq(), res.Write != nil, res.Gap, res.Duplicates)
	if res.Regressed {
		c.fatalf("applier %s<-%s reports a regression", n.r.name, n.origin)
	}
	if res.Gap {
		c.st.gapNacks++
	}
	c.st.dupEntries += res.Duplicates
	if res.Reply != nil {
		c.net.send(c.now, simMsg{from: n.r.name, to: n.origin, ack: res.Reply})
	}
	if w := res.Write; w != nil {
		if !w.Skipped.Empty() {
			c.fatalf("applier %s<-%s skipped %v", n.r.name, n.origin, w.Skipped)
		}
		at := c.now.Add(time.Duration(1+c.rng.IntN(20)) * time.Millisecond)
		if k := len(n.writes); k > 0 && at.Before(n.writes[k-1].at) {
			at = n.writes[k-1].at
		}
		fail := c.faults && c.rng.Float64() < c.o.pPersistFail
		n.writes = append(n.writes, timed[*Write]{at: at, v: w, fail: fail})
	}
}

func (n *applierNode) completeWrites() {
	c := n.c
	for len(n.writes) > 0 && !n.writes[0].at.After(c.now) {
		w := n.writes[0]
		n.writes = n.writes[1:]
		if w.fail {
			c.st.persistFails++
			c.logf("write fails %s<-%s through %d (+%d later)", n.r.name, n.origin, w.v.State.Through, len(n.writes))
			n.a.PersistFailed(w.v)
			for _, later := range n.writes {
				n.a.PersistFailed(later.v)
			}
			n.writes = nil
			return
		}
		n.apply(w.v)
		ack, err := n.a.Persisted(w.v)
		if err != nil {
			c.fatalf("applier %s<-%s: %v", n.r.name, n.origin, err)
		}
		c.net.send(c.now, simMsg{from: n.r.name, to: n.origin, ack: &ack})
	}
}

// apply makes w durable: its entries appended to the log and its state
// saved, atomically.
func (n *applierNode) apply(w *Write) {
	c := n.c
	if w.Prev != n.durable {
		c.fatalf("applier %s<-%s: write from %v but the record is %v", n.r.name, n.origin, w.Prev, n.durable)
	}
	for _, e := range w.Entries {
		if e.OriginSeq != n.r.stored[n.origin]+1 {
			c.fatalf("region %s: origin %s seq %d after %d (gap or duplicate)", n.r.name, n.origin, e.OriginSeq, n.r.stored[n.origin])
		}
		n.r.stored[n.origin] = e.OriginSeq
		if !e.Skip {
			e.ReplicateTo = nil
			c.append(n.r, e)
		}
	}
	if n.r.stored[n.origin] != w.State.Through {
		c.fatalf("applier %s<-%s: state %v after entries through %d", n.r.name, n.origin, w.State, n.r.stored[n.origin])
	}
	n.durable = w.State
}

func (n *applierNode) crash() {
	c := n.c
	c.st.applierCrashes++
	// A random prefix of the writes in flight is durable (the process
	// died before acknowledging them); the rest is lost.
	k := c.rng.IntN(len(n.writes) + 1)
	for _, w := range n.writes[:k] {
		if w.fail {
			break
		}
		n.apply(w.v)
	}
	n.writes = nil
	a, err := NewApplier(n.r.name, n.durable)
	if err != nil {
		c.t.Fatal(err)
	}
	n.a = a
	c.logf("crash applier %s<-%s; restart from %v", n.r.name, n.origin, n.durable)
}

// ---- end state ----

func (c *simCluster) converged() bool {
	for _, src := range c.names {
		r := c.regions[src]
		if r.tracker.Waiting() > 0 {
			return false
		}
		for _, dst := range c.names {
			if dst == src {
				continue
			}
			an := c.regions[dst].appliers[src]
			if an.durable.Through != r.localSeq || len(an.writes) > 0 || r.senders[dst].s.Status().Acked != r.localSeq {
				return false
			}
		}
	}
	return true
}

func (c *simCluster) describe() string {
	var b strings.Builder
	for _, src := range c.names {
		r := c.regions[src]
		fmt.Fprintf(&b, "region %s: local seq %d, log %d entries, receipts %d, waiting %d\n", src, r.localSeq, len(r.log), r.receipts, r.tracker.Waiting())
		for _, dst := range c.names {
			if dst == src {
				continue
			}
			st := r.senders[dst].s.Status()
			fmt.Fprintf(&b, "  sender →%s: %+v\n", dst, st)
			an := c.regions[dst].appliers[src]
			fmt.Fprintf(&b, "  applier at %s: %v, %d writes\n", dst, an.durable, len(an.writes))
		}
	}
	return b.String()
}

func (c *simCluster) checkFinal() {
	for _, name := range c.names {
		r := c.regions[name]
		got := map[string][]Entry{}
		for _, e := range r.log {
			got[e.Origin] = append(got[e.Origin], e)
		}
		for _, origin := range c.names {
			var want []Entry
			for _, e := range c.regions[origin].published {
				if origin == name || e.replicatesTo(name) {
					want = append(want, e)
				}
			}
			g := got[origin]
			if len(g) != len(want) {
				c.fatalf("region %s holds %d entries of %s, want %d", name, len(g), origin, len(want))
			}
			for i := range want {
				w, e := want[i], g[i]
				if e.OriginSeq != w.OriginSeq || e.OriginID != w.OriginID || string(e.Data) != string(w.Data) || e.PublishMs != w.PublishMs {
					c.fatalf("region %s, origin %s, #%d: got seq %d id %v %q, want seq %d id %v %q",
						name, origin, i, e.OriginSeq, e.OriginID, e.Data, w.OriginSeq, w.OriginID, w.Data)
				}
			}
		}
		if r.receipts != r.localSeq {
			c.fatalf("region %s receipted through %d of %d", name, r.receipts, r.localSeq)
		}
		// The log's positions ascend across rollovers.
		for i := 1; i < len(r.log); i++ {
			if !r.log[i-1].Pos.Less(r.log[i].Pos) {
				c.fatalf("region %s log positions not ascending at %d", name, i)
			}
		}
	}
}
