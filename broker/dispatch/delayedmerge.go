package dispatch

import "slices"

// Merging sealed buckets (Delayed; DelayedConfig.MaxBuckets), as Pulsar's
// BucketDelayedDeliveryTracker merges adjacent immutable buckets past
// delayedDeliveryMaxNumBuckets:
//
//  1. Work, with more sealed buckets than MaxBuckets and no merge out,
//     picks a run of 2 to 4 adjacent buckets (pickMerge), each persisted,
//     idle (no seal, load or other merge out) and with segments not yet
//     loaded, and returns a MergeWork naming those segments.
//  2. The shell reads them and hands them to Merged. Meanwhile the sources
//     go on as before: Due releases their entries, Work loads their
//     segments.
//  3. Merged takes what the sources hold not yet released at that moment
//     — each one's loaded segment and, of the segments read, those it has
//     not loaded since — sorts it by time into a new bucket, not
//     persisted (its entries in memory, like a freshly sealed one), and
//     removes the sources. Nothing the sources released is in it, so
//     nothing is released twice; nothing they held is left out.
//  4. Until the new bucket is persisted the list names the sources instead
//     (bucket.replaces): a crash then restores them, and the new bucket's
//     snapshot, unnamed, is garbage deleted at load. Once persisted the
//     list names it and not them, and they are deleted after that list is
//     written: a crash restores the new bucket (garbage: the sources).
//
// Either way every entry held is in a bucket the list names, or is read
// from the log again: the durability argument of Delayed is unchanged.

// mergeMax is the most buckets one merge takes (Pulsar's MAX_MERGE_NUM).
const mergeMax = 4

// mergeCand describes a sealed bucket for pickMerge.
type mergeCand struct {
	ok     bool  // it may be merged now
	left   int64 // entries not yet released
	nextAt int64 // the first time of its next segment not loaded
}

// pickMerge returns the run [i, i+k) of adjacent candidates to merge, k
// from 2 to mergeMax, or k = 0 for none: the longest run possible of
// candidates all ok; among runs of that length the one holding the fewest
// entries (the cheapest to rewrite), then the one whose next segment is
// due first.
func pickMerge(cands []mergeCand) (i, k int) {
	for k = min(mergeMax, len(cands)); k >= 2; k-- {
		best := -1
		var bestLeft, bestAt int64
		for i := 0; i+k <= len(cands); i++ {
			var left int64
			at := int64(1<<63 - 1)
			ok := true
			for _, c := range cands[i : i+k] {
				if !c.ok {
					ok = false
					break
				}
				left += c.left
				at = min(at, c.nextAt)
			}
			if ok && (best < 0 || left < bestLeft || left == bestLeft && at < bestAt) {
				best, bestLeft, bestAt = i, left, at
			}
		}
		if best >= 0 {
			return best, k
		}
	}
	return 0, 0
}

// mergeable reports whether b may be a source of a merge now.
func (b *bucket) mergeable() bool {
	return b.persisted && b.set != nil && !b.sealing && !b.loading && !b.merging && len(b.replaces) == 0 &&
		b.next < len(b.segLen)
}

// startMerge returns the merge to start, if any, marking its buckets.
func (d *Delayed) startMerge() *MergeWork {
	if d.merge != nil || d.cfg.MaxBuckets <= 0 || len(d.buckets) <= d.cfg.MaxBuckets {
		return nil
	}
	cands := make([]mergeCand, len(d.buckets))
	for j, b := range d.buckets {
		cands[j] = mergeCand{ok: b.mergeable(), left: b.left}
		if cands[j].ok {
			cands[j].nextAt = b.segFirst[b.next]
		}
	}
	i, k := pickMerge(cands)
	if k == 0 {
		return nil
	}
	m := &MergeWork{}
	for _, b := range d.buckets[i : i+k] {
		b.merging = true
		m.Buckets = append(m.Buckets, b.id)
		for s := b.next; s < len(b.segLen); s++ {
			m.Read = append(m.Read, SegmentRef{Bucket: b.id, Entry: int64(s) + 1})
		}
	}
	d.merge = m
	return m
}

// endMerge forgets the merge out, unmarking its buckets still there.
func (d *Delayed) endMerge() *MergeWork {
	m := d.merge
	d.merge = nil
	for _, id := range m.Buckets {
		if b := d.find(id); b != nil {
			b.merging = false
		}
	}
	return m
}

// Merges returns the number of merges completed.
func (d *Delayed) Merges() int64 { return d.merges }

// Merged hands over the data of the merge of Work gen: data[i] is what
// MergeWork.Read[i] read. It reports whether the caller must rewind the
// cursor: a segment was corrupt, its bucket is dropped (as in Loaded) and
// the merge abandoned. A merge whose sources changed meanwhile in a way it
// cannot absorb (one was released wholly, or dropped) is abandoned; Work
// may start another.
func (d *Delayed) Merged(gen uint64, data [][]byte) (rewind bool) {
	if gen != d.gen || d.merge == nil {
		return false
	}
	m := d.endMerge()
	if len(data) != len(m.Read) {
		panic("dispatch: Delayed.Merged: data does not match the MergeWork's reads")
	}
	srcs := make([]*bucket, len(m.Buckets))
	for j, id := range m.Buckets {
		if srcs[j] = d.find(id); srcs[j] == nil {
			return false
		}
	}
	var items []delayedItem
	for _, b := range srcs {
		items = append(items, b.cur...)
	}
	for j, ref := range m.Read {
		b := d.find(ref.Bucket)
		k := int(ref.Entry - 1)
		seg, err := decodeSegment(data[j])
		if err != nil || len(seg) != b.segLen[k] {
			return d.drop(b)
		}
		if k >= b.next { // else loaded since, and in b.cur or released
			items = append(items, seg...)
		}
	}
	var left int64
	var replaces []delayedEntry
	for _, b := range srcs {
		left += b.left
		replaces = append(replaces, b.listEntry())
	}
	if int64(len(items)) != left {
		panic("dispatch: Delayed.Merged: the merged entries do not add up to what the buckets hold")
	}
	slices.SortFunc(items, func(a, b delayedItem) int {
		if a.less(b) {
			return -1
		}
		if b.less(a) {
			return 1
		}
		return 0
	})
	sets := map[int64][]int64{}
	for _, it := range items {
		sets[it.pos.Ledger] = append(sets[it.pos.Ledger], it.pos.Entry)
	}
	for _, es := range sets {
		slices.Sort(es)
	}
	nb := d.newBucket(items, sets)
	nb.replaces = replaces
	d.buckets = slices.DeleteFunc(d.buckets, func(b *bucket) bool { return slices.Contains(srcs, b) })
	d.addBucket(nb)
	d.merges++
	return false
}

// MergeFailed reports a read of the merge of Work gen that failed; the
// merge is abandoned (a later Work may start it again). corrupt: the
// segment ref can never be read; its bucket is dropped (see Loaded).
func (d *Delayed) MergeFailed(gen uint64, ref SegmentRef, corrupt bool) (rewind bool) {
	if gen != d.gen || d.merge == nil {
		return false
	}
	d.endMerge()
	if b := d.find(ref.Bucket); corrupt && b != nil {
		return d.drop(b)
	}
	return false
}

// listEntry is b's entry in the list.
func (b *bucket) listEntry() delayedEntry {
	return delayedEntry{ID: b.id, First: b.first, Last: b.last, SegFirst: b.segFirst, SegLen: b.segLen, Done: b.done()}
}
