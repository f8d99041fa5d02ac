package replicator

import (
	"cmp"
	"fmt"
	"slices"
)

// Verification: does every region hold what an origin region holds?
//
// Each region summarizes, in one pass over its log, what it holds of each
// origin's entries of a topic: runs of consecutive sequence numbers (a
// HeldRun) with a digest per run. The origin is the reference: for every
// other region a Verify compares that region's runs with the origin's,
// bucket by bucket (VerifyBucketEntries sequence numbers each), and
// reports what the region lacks (missing), what it holds that the origin
// does not (extra: orphans), what both hold with different contents
// (mismatched), and what one side no longer holds because its retention
// trimmed it (trimmed, not missing). A bucket whose sets of sequence
// numbers and digest sums agree is settled by its summary alone; only a
// bucket that differs is read again, entry by entry (a detail read), so a
// large topic that agrees is read once.
//
// The core is pure: the shell reads the logs (broker/replication), feeds
// the summaries with Add, performs the detail reads that Needs lists,
// feeds them with AddDetail, and takes the Report.
//
// The digest of an entry (computed by the shell) covers what means the
// same message in every region, whatever its local ledger and entry id:
// origin region, origin sequence number, origin id, and each message's
// key, properties, event time and payload. A run's digest is the sum of
// its entries' digests modulo 2^64, so pieces of a bucket read in
// different chunks add up to the same value in every region.

// VerifyBucketEntries is the number of sequence numbers compared as one
// unit: bucket k holds sequence numbers k*B+1 .. (k+1)*B. A run never
// spans two buckets. 1,000 entries: a clean bucket costs one comparison,
// a differing one a detail read of at most 1,000 entries per region.
const VerifyBucketEntries = 1000

// Bucket returns the bucket of sequence number seq (>= 1).
func Bucket(seq uint64) uint64 { return (seq - 1) / VerifyBucketEntries }

// HeldRun is a run of entries of one origin held by one region:
// consecutive sequence numbers From..To whose origin ids are consecutive
// entries FirstID.Entry.. of origin ledger FirstID.Ledger, all in one
// bucket. At is the local position of From in the holding region (where
// a detail read starts). Digest is the sum of the entries' digests.
type HeldRun struct {
	From, To uint64
	FirstID  MessageID
	At       Position
	Digest   uint64
}

// idOf returns the origin id of seq, which r holds.
func (r HeldRun) idOf(seq uint64) MessageID {
	return MessageID{Ledger: r.FirstID.Ledger, Entry: r.FirstID.Entry + int64(seq-r.From), Batch: -1}
}

// EntryDigest is one entry of a detail read.
type EntryDigest struct {
	Seq    uint64
	ID     MessageID
	Digest uint64
}

// Held is what one region holds of one origin's entries: runs ascending
// by From, none overlapping.
type Held struct {
	Region string
	Runs   []HeldRun
}

// VerifyRange is a range of an origin's sequence numbers in a report,
// with the origin ids of its first and last entries ("ledger:entry": a
// batch entry's messages are ledger:entry:0 ..).
type VerifyRange struct {
	From    uint64 `json:"from"`
	To      uint64 `json:"to"`
	FirstID string `json:"firstId"`
	LastID  string `json:"lastId"`
}

// Len is the number of entries of r.
func (r VerifyRange) Len() uint64 { return r.To - r.From + 1 }

// RegionVerify is one region's comparison with the origin.
type RegionVerify struct {
	Region string `json:"region"`
	// Compared: entries both hold, compared by digest (in a bucket that
	// agrees, or one by one).
	Compared uint64 `json:"compared"`
	// Missing: held by the origin, not by the region. Extra: held by the
	// region, not by the origin (orphans). Mismatched: held by both, with
	// different digests.
	Missing    []VerifyRange `json:"missing"`
	Extra      []VerifyRange `json:"extra"`
	Mismatched []VerifyRange `json:"mismatched"`
	// Trimmed: held by one side only, below the first entry of the
	// origin the other side still holds: that side's retention trimmed
	// them (Side says which: the region or the origin).
	Trimmed []TrimmedRange `json:"trimmed"`
	// NotReplicated: held by the origin, at or below the base of its
	// current replication stream to the region (startAt latest, or a
	// resync's declared loss): never meant to reach the region.
	NotReplicated []VerifyRange `json:"notReplicated"`
	// The entries in each list.
	MissingEntries       uint64 `json:"missingEntries"`
	ExtraEntries         uint64 `json:"extraEntries"`
	MismatchedEntries    uint64 `json:"mismatchedEntries"`
	TrimmedEntries       uint64 `json:"trimmedEntries"`
	NotReplicatedEntries uint64 `json:"notReplicatedEntries"`
}

// TrimmedRange is a range one side's retention trimmed.
type TrimmedRange struct {
	VerifyRange
	Side string `json:"side"` // the region that trimmed it
}

// OriginVerify is the comparison of every region with one origin.
type OriginVerify struct {
	Origin string `json:"origin"`
	// Through: sequence numbers above it were not compared (published
	// after the verification began, or within its settle time).
	Through uint64 `json:"through"`
	// Held: entries the origin holds through Through.
	Held    uint64         `json:"held"`
	Regions []RegionVerify `json:"regions"`
}

// DetailRequest asks the shell for the entries (EntryDigest) of origin
// sequence numbers From..To (one bucket) in region Region, reading its
// log from local position At.
type DetailRequest struct {
	Region   string
	Bucket   uint64
	From, To uint64
	At       Position
}

// VerifyConfig is what a Verify compares against.
type VerifyConfig struct {
	// Origin is the reference region; Through the highest sequence number
	// compared.
	Origin  string
	Through uint64
	// OriginFirst is the first sequence number the origin still holds
	// (its retention trimmed every one below); Through+1 when it holds
	// none.
	OriginFirst uint64
	// Bases: by region, the base of the origin's current replication
	// stream to it (Cursor.Base): sequence numbers at or below it are not
	// carried to that region.
	Bases map[string]uint64
}

// Verify compares the regions' holdings of one origin's entries with the
// origin's. Not safe for concurrent use.
type Verify struct {
	cfg    VerifyConfig
	ref    Held
	others []Held
	detail map[detailKey][]EntryDigest
}

type detailKey struct {
	region string
	bucket uint64
}

// NewVerify returns a Verify against the origin's holding ref.
func NewVerify(cfg VerifyConfig, ref Held) *Verify {
	return &Verify{cfg: cfg, ref: ref, detail: map[detailKey][]EntryDigest{}}
}

// Add adds another region's holding.
func (v *Verify) Add(h Held) { v.others = append(v.others, h) }

// AddDetail adds the entries of a detail read (DetailRequest).
func (v *Verify) AddDetail(region string, bucket uint64, entries []EntryDigest) {
	v.detail[detailKey{region, bucket}] = entries
}

// Needs lists the detail reads the report still needs.
func (v *Verify) Needs() []DetailRequest {
	_, needs := v.pass()
	return needs
}

// Report compares; a bucket whose detail reads are missing is compared
// by its summary only (its differences reported as far as the sets of
// sequence numbers show them).
func (v *Verify) Report() OriginVerify {
	r, _ := v.pass()
	return r
}

// interval is a closed range of sequence numbers.
type interval struct{ from, to uint64 }

// bucketView is one side's runs in one bucket, clipped to Through.
type bucketView struct {
	runs    []HeldRun
	set     []interval // normalized: ascending, disjoint, not adjacent
	ids     []HeldRun  // idRuns(runs)
	sum     uint64
	clipped bool // a run crossed Through: its digest no longer covers the set
}

func byBucket(runs []HeldRun, through uint64) map[uint64]*bucketView {
	out := map[uint64]*bucketView{}
	for _, r := range runs {
		if r.From > through || r.To < r.From {
			continue
		}
		b := out[Bucket(r.From)]
		if b == nil {
			b = &bucketView{}
			out[Bucket(r.From)] = b
		}
		if r.To > through {
			r.To, b.clipped = through, true
		}
		b.runs = append(b.runs, r)
		b.sum += r.Digest
		b.set = append(b.set, interval{r.From, r.To})
	}
	for _, b := range out {
		b.set = normalize(b.set)
		b.ids = idRuns(b.runs)
	}
	return out
}

// idRuns returns the runs' mapping from sequence numbers to origin ids as
// maximal runs (seq From..To is FirstID.Entry..), whatever chunks and
// positions cut them: two regions holding the same ids for the same
// sequence numbers have equal idRuns.
func idRuns(runs []HeldRun) []HeldRun {
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b HeldRun) int { return cmp.Compare(a.From, b.From) })
	var out []HeldRun
	for _, r := range s {
		if n := len(out) - 1; n >= 0 && r.From == out[n].To+1 && r.FirstID.Ledger == out[n].FirstID.Ledger &&
			r.FirstID.Entry == out[n].FirstID.Entry+int64(r.From-out[n].From) {
			out[n].To = r.To
			continue
		}
		out = append(out, HeldRun{From: r.From, To: r.To, FirstID: r.FirstID})
	}
	return out
}

func normalize(s []interval) []interval {
	slices.SortFunc(s, func(a, b interval) int { return cmp.Compare(a.from, b.from) })
	var out []interval
	for _, i := range s {
		if n := len(out); n > 0 && i.from <= out[n-1].to+1 {
			out[n-1].to = max(out[n-1].to, i.to)
			continue
		}
		out = append(out, i)
	}
	return out
}

// minus returns a \ b (both normalized).
func minus(a, b []interval) []interval {
	var out []interval
	for _, x := range a {
		from := x.from
		for _, y := range b {
			if y.to < from || y.from > x.to {
				continue
			}
			if y.from > from {
				out = append(out, interval{from, y.from - 1})
			}
			from = y.to + 1
			if from > x.to {
				break
			}
		}
		if from <= x.to && from >= x.from {
			out = append(out, interval{from, x.to})
		}
	}
	return out
}

func size(s []interval) uint64 {
	var n uint64
	for _, i := range s {
		n += i.to - i.from + 1
	}
	return n
}

// idAt returns the origin id of seq in runs (which hold it).
func idAt(runs []HeldRun, seq uint64) MessageID {
	for _, r := range runs {
		if r.From <= seq && seq <= r.To {
			return r.idOf(seq)
		}
	}
	return MessageID{Ledger: -1, Entry: -1, Batch: -1}
}

func idString(id MessageID) string { return fmt.Sprintf("%d:%d", id.Ledger, id.Entry) }

// rangeList accumulates ranges, merging one that continues the last.
type rangeList struct {
	rs []VerifyRange
	n  uint64
}

func (l *rangeList) add(from, to uint64, first, last MessageID) {
	l.n += to - from + 1
	if k := len(l.rs) - 1; k >= 0 && l.rs[k].To+1 == from {
		l.rs[k].To, l.rs[k].LastID = to, idString(last)
		return
	}
	l.rs = append(l.rs, VerifyRange{From: from, To: to, FirstID: idString(first), LastID: idString(last)})
}

func (l *rangeList) list() []VerifyRange {
	if l.rs == nil {
		return []VerifyRange{}
	}
	return l.rs
}

// regionPass accumulates one region's report.
type regionPass struct {
	missing, extra, mismatched, regionTrim, originTrim, notRepl rangeList
	compared                                                    uint64
}

func (v *Verify) pass() (OriginVerify, []DetailRequest) {
	through := v.cfg.Through
	ref := byBucket(v.ref.Runs, through)
	rep := OriginVerify{Origin: v.cfg.Origin, Through: through, Regions: []RegionVerify{}}
	for _, b := range ref {
		rep.Held += size(b.set)
	}
	var needs []DetailRequest
	for _, h := range v.others {
		other := byBucket(h.Runs, through)
		var floor uint64 // the first entry of the origin the region holds
		for _, r := range h.Runs {
			if floor == 0 || r.From < floor {
				floor = r.From
			}
		}
		base := v.cfg.Bases[h.Region]
		var p regionPass
		buckets := make([]uint64, 0, len(ref)+len(other))
		for k := range ref {
			buckets = append(buckets, k)
		}
		for k := range other {
			if ref[k] == nil {
				buckets = append(buckets, k)
			}
		}
		slices.Sort(buckets)
		empty := &bucketView{}
		for _, k := range buckets {
			a, b := ref[k], other[k]
			if a == nil {
				a = empty
			}
			if b == nil {
				b = empty
			}
			common := minus(a.set, minus(a.set, b.set))
			if len(common) == 0 || (slices.Equal(a.ids, b.ids) && a.sum == b.sum && !a.clipped && !b.clipped) {
				p.compared += size(common)
				v.classify(&p, a, b, minus(a.set, b.set), minus(b.set, a.set), floor, base)
				continue
			}
			da, oka := v.detail[detailKey{v.cfg.Origin, k}]
			db, okb := v.detail[detailKey{h.Region, k}]
			if !oka || !okb {
				lo, hi := k*VerifyBucketEntries+1, min((k+1)*VerifyBucketEntries, through)
				if !oka {
					needs = append(needs, DetailRequest{Region: v.cfg.Origin, Bucket: k, From: lo, To: hi, At: a.runs[0].At})
				}
				if !okb {
					needs = append(needs, DetailRequest{Region: h.Region, Bucket: k, From: lo, To: hi, At: b.runs[0].At})
				}
				// Until the details come: what the sets show.
				p.compared += size(common)
				v.classify(&p, a, b, minus(a.set, b.set), minus(b.set, a.set), floor, base)
				continue
			}
			v.compareDetail(&p, a, b, da, db, floor, base)
		}
		rep.Regions = append(rep.Regions, RegionVerify{
			Region: h.Region, Compared: p.compared,
			Missing: p.missing.list(), Extra: p.extra.list(), Mismatched: p.mismatched.list(),
			Trimmed: trimmed(&p, h.Region, v.cfg.Origin), NotReplicated: p.notRepl.list(),
			MissingEntries: p.missing.n, ExtraEntries: p.extra.n, MismatchedEntries: p.mismatched.n,
			TrimmedEntries: p.regionTrim.n + p.originTrim.n, NotReplicatedEntries: p.notRepl.n,
		})
	}
	slices.SortFunc(rep.Regions, func(a, b RegionVerify) int {
		switch {
		case a.Region < b.Region:
			return -1
		case a.Region > b.Region:
			return 1
		}
		return 0
	})
	return rep, needs
}

func trimmed(p *regionPass, region, origin string) []TrimmedRange {
	out := []TrimmedRange{}
	for _, r := range p.regionTrim.rs {
		out = append(out, TrimmedRange{VerifyRange: r, Side: region})
	}
	for _, r := range p.originTrim.rs {
		out = append(out, TrimmedRange{VerifyRange: r, Side: origin})
	}
	slices.SortFunc(out, func(a, b TrimmedRange) int { return cmp.Compare(a.From, b.From) })
	return out
}

// classify reports lacking (held by the origin only) and surplus (held by
// the region only), split by the rules:
//   - the origin's entries at or below the stream's base: not replicated;
//   - the origin's entries below the first the region holds (above the
//     base): trimmed by the region (the region applies an origin's entries
//     contiguously from the stream's base, never past a gap, so it held
//     them);
//   - the region's entries below the origin's first: trimmed by the
//     origin;
//   - the rest: missing, or extra.
func (v *Verify) classify(p *regionPass, a, b *bucketView, lacking, surplus []interval, floor, base uint64) {
	for _, i := range lacking {
		for _, part := range split(i, base+1, floor) {
			first, last := idAt(a.runs, part.from), idAt(a.runs, part.to)
			switch {
			case part.to <= base:
				p.notRepl.add(part.from, part.to, first, last)
			case floor > 0 && part.to < floor:
				p.regionTrim.add(part.from, part.to, first, last)
			default:
				p.missing.add(part.from, part.to, first, last)
			}
		}
	}
	for _, i := range surplus {
		for _, part := range split(i, v.cfg.OriginFirst) {
			first, last := idAt(b.runs, part.from), idAt(b.runs, part.to)
			if part.to < v.cfg.OriginFirst {
				p.originTrim.add(part.from, part.to, first, last)
			} else {
				p.extra.add(part.from, part.to, first, last)
			}
		}
	}
}

// split cuts i before each of the given sequence numbers.
func split(i interval, at ...uint64) []interval {
	at = slices.Clone(at)
	slices.Sort(at)
	out := []interval{i}
	for _, c := range at {
		last := out[len(out)-1]
		if c > last.from && c <= last.to {
			out[len(out)-1].to = c - 1
			out = append(out, interval{c, last.to})
		}
	}
	return out
}

// compareDetail compares one bucket entry by entry.
func (v *Verify) compareDetail(p *regionPass, a, b *bucketView, da, db []EntryDigest, floor, base uint64) {
	through := v.cfg.Through
	byseq := func(es []EntryDigest) map[uint64]EntryDigest {
		m := make(map[uint64]EntryDigest, len(es))
		for _, e := range es {
			if e.Seq <= through {
				m[e.Seq] = e
			}
		}
		return m
	}
	ma, mb := byseq(da), byseq(db)
	seqs := make([]uint64, 0, len(ma)+len(mb))
	for s := range ma {
		seqs = append(seqs, s)
	}
	for s := range mb {
		if _, ok := ma[s]; !ok {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	var lacking, surplus []interval
	for _, s := range seqs {
		ea, oka := ma[s]
		eb, okb := mb[s]
		switch {
		case oka && okb:
			p.compared++
			if ea.Digest != eb.Digest || ea.ID.Ledger != eb.ID.Ledger || ea.ID.Entry != eb.ID.Entry {
				p.mismatched.add(s, s, ea.ID, ea.ID)
			}
		case oka:
			lacking = append(lacking, interval{s, s})
		default:
			surplus = append(surplus, interval{s, s})
		}
	}
	// The ids of the detail entries name the ranges.
	runsOf := func(es map[uint64]EntryDigest) []HeldRun {
		out := make([]HeldRun, 0, len(es))
		for s, e := range es {
			out = append(out, HeldRun{From: s, To: s, FirstID: e.ID})
		}
		return out
	}
	v.classify(p, &bucketView{runs: runsOf(ma)}, &bucketView{runs: runsOf(mb)}, normalize(lacking), normalize(surplus), floor, base)
}

// RunBuilder builds a region's runs of one origin from its entries of
// that origin, added in log order (ascending sequence numbers). Not safe
// for concurrent use.
type RunBuilder struct{ runs []HeldRun }

// Add adds the entry with sequence number seq, origin id id, local
// position at and digest d.
func (b *RunBuilder) Add(seq uint64, id MessageID, at Position, d uint64) {
	if k := len(b.runs) - 1; k >= 0 {
		r := &b.runs[k]
		if seq == r.To+1 && Bucket(seq) == Bucket(r.From) && id.Ledger == r.FirstID.Ledger && id.Entry == r.FirstID.Entry+int64(seq-r.From) {
			r.To, r.Digest = seq, r.Digest+d
			return
		}
	}
	b.runs = append(b.runs, HeldRun{From: seq, To: seq, FirstID: MessageID{Ledger: id.Ledger, Entry: id.Entry, Batch: -1}, At: at, Digest: d})
}

// Runs returns the runs built.
func (b *RunBuilder) Runs() []HeldRun { return b.runs }
