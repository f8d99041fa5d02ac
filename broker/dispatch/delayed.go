package dispatch

import (
	"container/heap"
	"slices"
)

// The delayed-delivery index of a Shared or Key_Shared subscription: the
// entries whose MessageMetadata.deliver_at_time is still ahead, held back
// from dispatch until then (Pulsar's DeliverAfter / DeliverAt; retry-letter
// topics depend on it). Exclusive and Failover subscriptions do not hold
// them, as in Pulsar.
//
// It is bucketed as Pulsar's BucketDelayedDeliveryTracker (PIP-195), so it
// does not hold every delayed entry in memory:
//
//   - the open bucket takes the entries as dispatch reads them, in memory
//     (a heap by time), over a range of log positions;
//   - at DelayedConfig.BucketMax entries it is sealed: sorted by time, cut
//     into segments of SegmentMax, and persisted as one immutable
//     snapshot (mledger.Snapshot.WriteSegments): entry 0 the set of
//     positions it holds, entry k+1 segment k. Once persisted, only the
//     segment due next stays in memory, loaded when its first entry is due
//     within LookaheadMs; the set stays (to tell, when the log is read
//     again after a restart, which entries the bucket already holds);
//   - a small list (which buckets, their ranges, each segment's first time
//     and size, how many segments were released) is a snapshot of its own;
//   - beyond DelayedConfig.MaxBuckets sealed buckets, 2 to 4 adjacent ones
//     are merged into one (Pulsar's delayedDeliveryMaxNumBuckets): what
//     they hold not yet released — their loaded segments and the segments
//     read back for the merge — is sealed as a new bucket, which the list
//     names instead of them once it is persisted; until then the list
//     keeps naming them, so a crash at any step restores one or the other.
//
// Durability without losing or advancing anything: an entry held here is
// not acknowledged on the cursor, so after a restart dispatch reads it
// again from the cursor's mark-delete position. Its time has come: it is
// dispatched (whatever any bucket says). It has not: it is held again — by
// the persisted bucket whose set names it, or else in the new open
// bucket. The open bucket is never persisted: the log is its log.
//
// # The caller's duties (the subscription shell)
//
//  1. Serialize every call (the subscription's mutex), as for Core.
//  2. On load, before reading the log: Restore the list's blob, delete the
//     persisted buckets it does not reference (Referenced), then run Work
//     until Ready: no entry may be offered to Add or Contains before.
//  3. For each entry read from the cursor under Shared or Key_Shared whose
//     time is ahead: Contains, else Add; do not offer it to Core. An entry
//     whose time has come goes to Core as any other, even if Contains.
//  4. Take Due positions into Core's replay (Release); skip those the
//     cursor acknowledged.
//  5. After every change run Work(now) and do what it asks, unlocked, in
//     order, one Work at a time: Seal (write the bucket), then List (write
//     the list), then Delete (the buckets the written list no longer
//     names), then Load (read one segment), then Merge (read the segments
//     it names); report each with Sealed, ListWritten, Loaded or
//     LoadFailed, Merged or MergeFailed, passing Work's Gen. A failed
//     write is retried by a later Work (back off).
//  6. Sleep until WakeAt, or an input.
//  7. On a seek, or when the subscription becomes Exclusive or Failover:
//     Clear, and rewind the cursor.
type Delayed struct {
	cfg DelayedConfig
	gen uint64

	open     itemHeap
	openSet  map[int64][]int64 // ledger → entries held by the open bucket, ascending
	buckets  []*bucket         // sealed, ascending by position range
	nextID   uint64
	held     int64  // entries held, in memory or persisted
	listVer  uint64 // bumped by every change of what the list says
	listDone uint64 // the version last written
	deletes  []pendingDelete
	restored bool
	merge    *MergeWork // the merge out, if any (one at a time)
	merges   int64      // merges completed
}

// DelayedConfig configures a Delayed index. Zero fields take defaults.
type DelayedConfig struct {
	// BucketMax: the open bucket is sealed and persisted once it holds
	// this many entries. Default 50,000 (Pulsar's
	// delayedDeliveryMinIndexCountPerBucket): 1,000,000 delayed entries
	// make 20 buckets, and the open one costs about 2 MB. -1: never seal
	// (every delayed entry stays in memory; nothing is persisted).
	BucketMax int
	// SegmentMax: entries per segment of a sealed bucket, the unit loaded
	// back into memory. Default 1,000 (Pulsar's default is 5,000): with
	// 20 buckets due in the same hour, at most about 20 segments
	// (~0.5 MB) are in memory.
	SegmentMax int
	// LookaheadMs: a segment is loaded when its first entry is due within
	// this many milliseconds, so a load's latency does not make it late.
	// Default 10,000.
	LookaheadMs int64
	// MaxBuckets: once there are more sealed buckets than this, 2 to 4
	// adjacent ones are merged into one, one merge at a time (Pulsar's
	// delayedDeliveryMaxNumBuckets, which Pulsar leaves off, -1, by
	// default). It bounds what grows with the count: the segments in
	// memory (one due a bucket, ~24 KB each), and the buckets Contains and
	// Due look at for each entry. Default 50: a subscription holding
	// 2,500,000 entries in buckets of 50,000 starts merging; 1,000,000
	// (20 buckets) never do. A merge reads its buckets' segments back,
	// holds up to 4 buckets' entries in memory (4 × 50,000 × 24 B ≈ 5 MB)
	// until the merged bucket is written, and writes them again. -1:
	// never merge.
	MaxBuckets int
}

func (c DelayedConfig) withDefaults() DelayedConfig {
	if c.BucketMax == 0 {
		c.BucketMax = 50_000
	}
	if c.SegmentMax <= 0 {
		c.SegmentMax = 1_000
	}
	if c.LookaheadMs <= 0 {
		c.LookaheadMs = 10_000
	}
	if c.MaxBuckets == 0 {
		c.MaxBuckets = 50
	}
	return c
}

type delayedItem struct {
	at  int64
	pos Position
}

func (a delayedItem) less(b delayedItem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.pos.Less(b.pos)
}

type itemHeap []delayedItem

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h[i].less(h[j]) }
func (h itemHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)        { *h = append(*h, x.(delayedItem)) }
func (h *itemHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// bucket is a sealed bucket.
type bucket struct {
	id          uint64
	first, last Position
	set         *posSet // nil until loaded (after Restore)
	segFirst    []int64 // first time of each segment
	segLen      []int
	next        int           // segments before next were loaded
	cur         []delayedItem // the loaded segment's entries not yet due, by time
	left        int64         // entries not yet released
	// all: every segment, until the bucket is persisted.
	all       [][]delayedItem
	persisted bool
	sealing   bool // a Seal of it is out
	loading   bool // a Load of it is out
	merging   bool // it is a source of the merge out
	// replaces: of a merged bucket not yet persisted, the list entries of
	// the persisted buckets it replaces. The list names them instead of
	// it until it is persisted; then they are deleted after the list.
	replaces []delayedEntry
}

// done is the number of segments wholly released.
func (b *bucket) done() int {
	if len(b.cur) > 0 {
		return b.next - 1
	}
	return b.next
}

type pendingDelete struct {
	id        uint64
	afterList uint64 // deleted once the list of this version is written
}

// NewDelayed returns an empty index, ready (nothing to restore).
func NewDelayed(cfg DelayedConfig) *Delayed {
	return &Delayed{cfg: cfg.withDefaults(), openSet: map[int64][]int64{}, nextID: 1, restored: true}
}

// Len returns the number of entries held (in memory or persisted), not
// yet released by Due.
func (d *Delayed) Len() int64 { return d.held }

// InMemory returns the number of entries held in memory: the open bucket,
// the loaded segments, the buckets not yet persisted.
func (d *Delayed) InMemory() int {
	n := len(d.open)
	for _, b := range d.buckets {
		if b.all != nil {
			for _, s := range b.all[b.next:] {
				n += len(s)
			}
		}
		n += len(b.cur)
	}
	return n
}

// Buckets returns the number of sealed buckets.
func (d *Delayed) Buckets() int { return len(d.buckets) }

// Ready reports whether every bucket's set of positions is loaded, so
// Contains answers for every position: until then, no entry read from the
// log may be offered.
func (d *Delayed) Ready() bool {
	for _, b := range d.buckets {
		if b.set == nil {
			return false
		}
	}
	return d.restored
}

// Contains reports whether the index holds the entry at p.
func (d *Delayed) Contains(p Position) bool {
	if es := d.openSet[p.Ledger]; len(es) > 0 {
		if _, ok := slices.BinarySearch(es, p.Entry); ok {
			return true
		}
	}
	for _, b := range d.buckets {
		if !p.Less(b.first) && !b.last.Less(p) && b.set != nil && b.set.has(p) {
			return true
		}
	}
	return false
}

// Add holds the entry at p until atMs (Unix ms). It reports false, and
// does nothing, when the index holds p already.
func (d *Delayed) Add(p Position, atMs int64) bool {
	if d.Contains(p) {
		return false
	}
	heap.Push(&d.open, delayedItem{at: atMs, pos: p})
	es := d.openSet[p.Ledger]
	i, _ := slices.BinarySearch(es, p.Entry)
	d.openSet[p.Ledger] = slices.Insert(es, i, p.Entry)
	d.held++
	if d.cfg.BucketMax > 0 && len(d.open) >= d.cfg.BucketMax {
		d.seal()
	}
	return true
}

// seal turns the open bucket into a sealed one, not persisted yet.
func (d *Delayed) seal() {
	items := slices.Clone([]delayedItem(d.open))
	slices.SortFunc(items, func(a, b delayedItem) int {
		if a.less(b) {
			return -1
		}
		if b.less(a) {
			return 1
		}
		return 0
	})
	d.addBucket(d.newBucket(items, d.openSet))
	d.open = nil
	d.openSet = map[int64][]int64{}
}

// newBucket returns a sealed bucket, not persisted, of items (by time)
// whose positions are set (ledger → ascending entries).
func (d *Delayed) newBucket(items []delayedItem, set map[int64][]int64) *bucket {
	b := &bucket{id: d.nextID, set: newPosSet(set), left: int64(len(items))}
	d.nextID++
	b.first, b.last = b.set.bounds()
	for off := 0; off < len(items); off += d.cfg.SegmentMax {
		seg := items[off:min(off+d.cfg.SegmentMax, len(items))]
		b.all = append(b.all, seg)
		b.segFirst = append(b.segFirst, seg[0].at)
		b.segLen = append(b.segLen, len(seg))
	}
	return b
}

// addBucket adds a sealed bucket, keeping them ascending by position.
func (d *Delayed) addBucket(b *bucket) {
	d.buckets = append(d.buckets, b)
	sortBuckets(d.buckets)
}

func sortBuckets(bs []*bucket) {
	slices.SortStableFunc(bs, func(x, y *bucket) int {
		if x.first.Less(y.first) {
			return -1
		}
		if y.first.Less(x.first) {
			return 1
		}
		return 0
	})
}

// advance loads b's next segment from memory when it is due within the
// lookahead and b has not been persisted yet.
func (d *Delayed) advance(b *bucket, nowMs int64) {
	if len(b.cur) > 0 || b.loading || b.next >= len(b.segLen) || b.all == nil {
		return
	}
	if b.segFirst[b.next] <= nowMs+d.cfg.LookaheadMs {
		b.cur = b.all[b.next]
		b.next++
	}
}

// Due releases up to max entries whose time is at or before nowMs, by
// time, and returns their positions. An entry of a segment still being
// loaded is released once it is.
func (d *Delayed) Due(nowMs int64, max int) []Position {
	var out []Position
	for _, b := range d.buckets {
		d.advance(b, nowMs)
	}
	for len(out) < max {
		var best *bucket
		var head delayedItem
		ok := false
		if len(d.open) > 0 {
			head, ok = d.open[0], true
		}
		for _, b := range d.buckets {
			if len(b.cur) > 0 && (!ok || b.cur[0].less(head)) {
				best, head, ok = b, b.cur[0], true
			}
		}
		if !ok || head.at > nowMs {
			break
		}
		if best == nil {
			heap.Pop(&d.open)
			if es := d.openSet[head.pos.Ledger]; len(es) > 0 {
				if i, found := slices.BinarySearch(es, head.pos.Entry); found {
					d.openSet[head.pos.Ledger] = slices.Delete(es, i, i+1)
				}
				if len(d.openSet[head.pos.Ledger]) == 0 {
					delete(d.openSet, head.pos.Ledger)
				}
			}
		} else {
			best.cur = best.cur[1:]
			best.left--
			if len(best.cur) == 0 {
				best.cur = nil
				if best.persisted {
					d.listVer++ // a segment was released: the list says so
				}
				d.advance(best, nowMs)
			}
		}
		d.held--
		out = append(out, head.pos)
	}
	d.collect()
	return out
}

// collect drops the buckets wholly released; a persisted one is deleted
// once a list without it is written.
func (d *Delayed) collect() {
	d.buckets = slices.DeleteFunc(d.buckets, func(b *bucket) bool {
		if b.left > 0 || b.sealing || b.loading {
			return false
		}
		if b.persisted || len(b.replaces) > 0 {
			d.listVer++
			d.deleteAfterList(b)
		}
		return true
	})
}

// deleteAfterList queues the deletion of b's snapshot and of those it
// replaces, once the list of the current version is written.
func (d *Delayed) deleteAfterList(b *bucket) {
	d.deletes = append(d.deletes, pendingDelete{id: b.id, afterList: d.listVer})
	for _, r := range b.replaces {
		d.deletes = append(d.deletes, pendingDelete{id: r.ID, afterList: d.listVer})
	}
	b.replaces = nil
}

// WakeAt returns when Due or Work next has something to do by time alone
// (an entry's time, or a segment to load), Unix ms; false if nothing waits
// for a time.
func (d *Delayed) WakeAt() (int64, bool) {
	at, ok := int64(0), false
	take := func(t int64) {
		if !ok || t < at {
			at, ok = t, true
		}
	}
	if len(d.open) > 0 {
		take(d.open[0].at)
	}
	for _, b := range d.buckets {
		switch {
		case len(b.cur) > 0:
			take(b.cur[0].at)
		case !b.loading && b.next < len(b.segFirst):
			take(b.segFirst[b.next] - d.cfg.LookaheadMs)
		}
	}
	return at, ok
}

// Clear forgets every entry held (a seek; the subscription became
// Exclusive or Failover): the caller rewinds the cursor, so dispatch reads
// them again. Persisted buckets are deleted once an empty list is written;
// results of Work issued before Clear are ignored.
func (d *Delayed) Clear() {
	d.gen++
	if len(d.buckets) > 0 || d.held > 0 {
		d.listVer++
	}
	for _, b := range d.buckets {
		d.deleteAfterList(b)
	}
	d.merge = nil
	d.buckets = nil
	d.open = nil
	d.openSet = map[int64][]int64{}
	d.held = 0
}

// SegmentRef names one entry of a bucket's snapshot: 0 its set of
// positions, k+1 its segment k.
type SegmentRef struct {
	Bucket uint64
	Entry  int64
}

// SealWork is a bucket to persist: Segments are its snapshot's entries.
type SealWork struct {
	Bucket   uint64
	Segments [][]byte
}

// DelayedWork is what the shell is to do (Work), in this order.
type DelayedWork struct {
	Gen  uint64
	Seal []SealWork
	// List, when not nil, is the list to write (version ListVersion).
	List        []byte
	ListVersion uint64
	Delete      []uint64 // buckets whose snapshots to delete
	Load        []SegmentRef
	// Merge, when not nil, is a merge to read for: report it with Merged
	// (the data of every Read, in order) or MergeFailed.
	Merge *MergeWork
}

// MergeWork names adjacent sealed buckets to merge and the segments of
// theirs, not loaded yet, to read back for it.
type MergeWork struct {
	Buckets []uint64
	Read    []SegmentRef
}

// Empty reports whether there is nothing to do.
func (w DelayedWork) Empty() bool {
	return len(w.Seal) == 0 && w.List == nil && len(w.Delete) == 0 && len(w.Load) == 0 && w.Merge == nil
}

// Work returns the I/O to do now, marking seals and loads as out (a later
// Work does not return them again until their result is reported). The
// list is returned while it differs from the last one written, and only
// names persisted buckets; a bucket is deleted only once a list without it
// was written.
func (d *Delayed) Work(nowMs int64) DelayedWork {
	w := DelayedWork{Gen: d.gen}
	for _, b := range d.buckets {
		if !b.persisted && !b.sealing {
			b.sealing = true
			w.Seal = append(w.Seal, SealWork{Bucket: b.id, Segments: b.encode()})
		}
	}
	if d.listVer != d.listDone {
		w.List, w.ListVersion = d.encodeList(), d.listVer
	}
	keep := d.deletes[:0]
	for _, pd := range d.deletes {
		if pd.afterList <= d.listDone {
			w.Delete = append(w.Delete, pd.id)
		} else {
			keep = append(keep, pd)
		}
	}
	d.deletes = keep
	for _, b := range d.buckets {
		if !b.persisted || b.loading {
			continue
		}
		if b.set == nil {
			b.loading = true
			w.Load = append(w.Load, SegmentRef{Bucket: b.id, Entry: 0})
			continue
		}
		if len(b.cur) == 0 && b.next < len(b.segLen) && b.segFirst[b.next] <= nowMs+d.cfg.LookaheadMs {
			b.loading = true
			w.Load = append(w.Load, SegmentRef{Bucket: b.id, Entry: int64(b.next) + 1})
		}
	}
	w.Merge = d.startMerge()
	return w
}

func (d *Delayed) find(id uint64) *bucket {
	for _, b := range d.buckets {
		if b.id == id {
			return b
		}
	}
	return nil
}

// Sealed reports the outcome of a Seal of Work gen. Once persisted, a
// bucket keeps in memory only its set and its loaded segment, and the
// list names it; a failed seal is returned by a later Work again.
func (d *Delayed) Sealed(gen, id uint64, ok bool) {
	b := d.find(id)
	if gen != d.gen || b == nil || !b.sealing {
		return
	}
	b.sealing = false
	if !ok {
		return
	}
	b.persisted = true
	b.all = nil
	d.listVer++
	// The list of this version names b, not the buckets it merged: they
	// are deleted once it is written.
	for _, r := range b.replaces {
		d.deletes = append(d.deletes, pendingDelete{id: r.ID, afterList: d.listVer})
	}
	b.replaces = nil
	d.collect()
}

// ListWritten reports that the list of version v was written.
func (d *Delayed) ListWritten(v uint64) {
	if v > d.listDone {
		d.listDone = v
	}
}

// Loaded hands over the data of a Load of Work gen. It reports whether the
// caller must rewind the cursor: the data was corrupt, the bucket is
// dropped, and the entries it held are to be read from the log again.
func (d *Delayed) Loaded(gen uint64, ref SegmentRef, data []byte) (rewind bool) {
	b := d.find(ref.Bucket)
	if gen != d.gen || b == nil || !b.loading {
		return false
	}
	b.loading = false
	if ref.Entry == 0 {
		set, err := decodePosSet(data)
		if err != nil {
			return d.drop(b)
		}
		b.set = set
		return false
	}
	k := int(ref.Entry - 1)
	items, err := decodeSegment(data)
	if err != nil || k != b.next || len(items) != b.segLen[k] {
		return d.drop(b)
	}
	b.cur = items
	b.next++
	return false
}

// LoadFailed reports a Load of Work gen that failed; corrupt: it can never
// succeed (the bucket is dropped; see Loaded). Otherwise a later Work
// returns it again.
func (d *Delayed) LoadFailed(gen uint64, ref SegmentRef, corrupt bool) (rewind bool) {
	b := d.find(ref.Bucket)
	if gen != d.gen || b == nil || !b.loading {
		return false
	}
	b.loading = false
	if corrupt {
		return d.drop(b)
	}
	return false
}

// drop forgets a bucket whose snapshot is unusable. Its entries are read
// from the log again: rewind unless dispatch never read past them (its
// set was never loaded: Ready was false, nothing was read).
func (d *Delayed) drop(b *bucket) (rewind bool) {
	rewind = b.set != nil
	d.held -= b.left
	d.buckets = slices.DeleteFunc(d.buckets, func(x *bucket) bool { return x == b })
	d.listVer++
	d.deletes = append(d.deletes, pendingDelete{id: b.id, afterList: d.listVer})
	return rewind
}

// Referenced reports whether the index names bucket id (restored, sealed
// or being deleted): a persisted bucket it does not name is garbage of a
// crash, for the caller to delete at load.
func (d *Delayed) Referenced(id uint64) bool {
	if d.find(id) != nil {
		return true
	}
	for _, b := range d.buckets {
		for _, r := range b.replaces {
			if r.ID == id {
				return true
			}
		}
	}
	for _, pd := range d.deletes {
		if pd.id == id {
			return true
		}
	}
	return false
}

// Restore replaces the index with the list persisted last (nil: none).
// The buckets' sets are then loaded by Work (Ready is false until they
// are). An unreadable list restores nothing and returns the error: every
// persisted bucket is then garbage, and the log is read again.
func (d *Delayed) Restore(list []byte) error {
	d.Clear()
	d.deletes = nil
	d.listVer, d.listDone = 0, 0
	d.restored = true
	if list == nil {
		return nil
	}
	l, err := decodeList(list)
	if err != nil {
		return err
	}
	d.nextID = max(l.NextID, 1)
	for _, lb := range l.Buckets {
		b := &bucket{id: lb.ID, first: lb.First, last: lb.Last, segFirst: lb.SegFirst, segLen: lb.SegLen,
			next: lb.Done, persisted: true}
		for _, n := range lb.SegLen[lb.Done:] {
			b.left += int64(n)
		}
		d.held += b.left
		d.buckets = append(d.buckets, b)
	}
	sortBuckets(d.buckets)
	return nil
}

// MemoryBytes estimates the index's memory: 24 bytes an entry in memory
// (its time and position), 8 more in the open bucket (its position set),
// and the sealed buckets' sets.
func (d *Delayed) MemoryBytes() int64 {
	n := int64(d.InMemory())*24 + int64(len(d.open))*8
	for _, b := range d.buckets {
		if b.set != nil {
			n += int64(b.set.bytes())
		}
	}
	return n
}

// Release queues entries of the delayed index whose time came (Delayed.Due)
// for dispatch: into replay, sent before new entries as replays are. An
// entry already dispatched (pending) is left as it is.
func (c *Core) Release(ps []Position) {
	for _, p := range ps {
		if _, ok := c.pending[p]; !ok {
			if _, ok := c.replay[p]; !ok {
				c.replay[p] = 0
			}
		}
	}
}

// Replays returns the number of entries waiting in replay.
func (c *Core) Replays() int { return len(c.replay) }
