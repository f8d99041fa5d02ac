package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/broker/entry"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
)

// Verification (`meridian admin replication verify`, replicator/verify.go
// is the design): the broker that serves the admin call asks the topic's
// owner in every region of the namespace, its own included, over the
// Replication service's Verify call, for the summary of its log in
// chunks; compares every origin's entries with the other regions'; and
// asks again, entry by entry, only for the buckets that differ.

const (
	// verifyChunkEntries bounds the entries one Verify call reads (about
	// 5,000 x the mean entry size of bookie reads, a few runs per origin
	// and bucket in the answer).
	verifyChunkEntries = 5000
	verifyChunkBytes   = 16 << 20
	// verifyCallTimeout bounds one Verify call.
	verifyCallTimeout = 30 * time.Second
)

// TopicVerify is one topic's verification.
type TopicVerify struct {
	Topic   string                    `json:"topic"`
	Origins []replicator.OriginVerify `json:"origins"`
	// Unreachable: the regions whose summary could not be read, with why
	// (their comparisons are absent from Origins).
	Unreachable map[string]string `json:"unreachable,omitempty"`
	// Unreadable: entries that are not Meridian entries, by region (not
	// compared).
	Unreadable map[string]uint64 `json:"unreadable,omitempty"`
	VerifyTotals
}

// VerifyTotals counts the entries of a verification's lists.
type VerifyTotals struct {
	Compared      uint64 `json:"compared"`
	Missing       uint64 `json:"missing"`
	Extra         uint64 `json:"extra"`
	Mismatched    uint64 `json:"mismatched"`
	Trimmed       uint64 `json:"trimmed"`
	NotReplicated uint64 `json:"notReplicated"`
}

func (t *VerifyTotals) add(o VerifyTotals) {
	t.Compared += o.Compared
	t.Missing += o.Missing
	t.Extra += o.Extra
	t.Mismatched += o.Mismatched
	t.Trimmed += o.Trimmed
	t.NotReplicated += o.NotReplicated
}

// VerifyReport is a verification of a namespace's topics or of one topic.
type VerifyReport struct {
	Target  string        `json:"target"`
	Settle  string        `json:"settle"`
	Regions []string      `json:"regions"`
	Topics  []TopicVerify `json:"topics"`
	VerifyTotals
	// Unreachable counts the topics with a region not read.
	Unreachable int `json:"unreachable"`
	// Clean: nothing missing, extra or mismatched, every region read.
	Clean bool `json:"clean"`
}

// VerifyReplication verifies target, a namespace (tenant/ns) or a topic
// (persistent://tenant/ns/topic): for every origin region, what every
// region of the namespace holds of the origin's entries against what the
// origin holds. Entries the origin published within settle of the start
// are not compared (still in flight).
func (svc *Service) VerifyReplication(ctx context.Context, target string, settle time.Duration) (VerifyReport, error) {
	var topics []string
	var ns string
	if strings.HasPrefix(target, "persistent://") {
		tn, err := meta.ParseTopic(target)
		if err != nil {
			return VerifyReport{}, meta.BadRequest(err)
		}
		topics, ns = []string{tn.String()}, tn.NamespaceName()
	} else {
		ns = target
		var err error
		if topics, err = svc.cfg.Meta.ListTopics(ctx, ns); err != nil {
			return VerifyReport{}, err
		}
	}
	pol, err := svc.cfg.Meta.GetPolicies(ctx, ns)
	if err != nil {
		return VerifyReport{}, err
	}
	regions := sortedRegions(pol.ReplicationClusters)
	rep := VerifyReport{Target: target, Settle: settle.String(), Regions: regions, Topics: []TopicVerify{}}
	sort.Strings(topics)
	for _, name := range topics {
		tv, err := svc.verifyTopic(ctx, name, regions, verifyRun{settle: settle})
		if err != nil {
			return VerifyReport{}, err
		}
		rep.Topics = append(rep.Topics, tv)
		rep.VerifyTotals.add(tv.VerifyTotals)
		if len(tv.Unreachable) > 0 {
			rep.Unreachable++
		}
	}
	rep.Clean = rep.Missing == 0 && rep.Extra == 0 && rep.Mismatched == 0 && rep.Unreachable == 0
	return rep, nil
}

func sortedRegions(rs []string) []string { return slices.Sorted(slices.Values(rs)) }

// verifyRun is how a verification runs: settle (VerifyReplication), the
// origins compared (nil: every region), and pace, if set, called after
// each chunk read with its entries (the background verifier's rate).
type verifyRun struct {
	settle  time.Duration
	origins []string
	pace    func(ctx context.Context, entries int) error
}

// regionScan is what one region holds of a topic, as its summary said.
type regionScan struct {
	region string
	addr   string // the owner's replication address, once known
	held   map[string][]replicator.HeldRun
	// localSeq: the region's last local sequence number at the scan's
	// start; firstUnsettled: its lowest local one within the settle time.
	localSeq, firstUnsettled uint64
	bases                    map[string]uint64
	unreadable               uint64
}

func (svc *Service) verifyTopic(ctx context.Context, name string, regions []string, run verifyRun) (TopicVerify, error) {
	tv := TopicVerify{Topic: name, Origins: []replicator.OriginVerify{}}
	scans := map[string]*regionScan{}
	for _, r := range regions {
		sc, err := svc.scanRegion(ctx, r, name, run)
		if err != nil {
			if ctx.Err() != nil {
				return tv, ctx.Err()
			}
			if tv.Unreachable == nil {
				tv.Unreachable = map[string]string{}
			}
			tv.Unreachable[r] = err.Error()
			continue
		}
		scans[r] = sc
		if sc.unreadable > 0 {
			if tv.Unreadable == nil {
				tv.Unreadable = map[string]uint64{}
			}
			tv.Unreadable[r] = sc.unreadable
		}
	}
	for _, origin := range regions {
		ref := scans[origin]
		if ref == nil || (run.origins != nil && !slices.Contains(run.origins, origin)) {
			continue
		}
		through := ref.localSeq
		if ref.firstUnsettled > 0 {
			through = min(through, ref.firstUnsettled-1)
		}
		first := ref.localSeq + 1
		for _, r := range ref.held[origin] {
			first = min(first, r.From)
		}
		v := replicator.NewVerify(replicator.VerifyConfig{Origin: origin, Through: through, OriginFirst: first, Bases: ref.bases},
			replicator.Held{Region: origin, Runs: ref.held[origin]})
		for _, r := range regions {
			if sc := scans[r]; sc != nil && r != origin {
				v.Add(replicator.Held{Region: r, Runs: sc.held[origin]})
			}
		}
		for _, need := range v.Needs() {
			es, err := svc.detailRead(ctx, scans[need.Region], name, origin, need, run)
			if err != nil {
				return tv, fmt.Errorf("verify %s: detail read of %s's entries %d..%d in %s: %w", name, origin, need.From, need.To, need.Region, err)
			}
			v.AddDetail(need.Region, need.Bucket, es)
		}
		ov := v.Report()
		tv.Origins = append(tv.Origins, ov)
		for _, rv := range ov.Regions {
			tv.add(VerifyTotals{Compared: rv.Compared, Missing: rv.MissingEntries, Extra: rv.ExtraEntries, Mismatched: rv.MismatchedEntries,
				Trimmed: rv.TrimmedEntries, NotReplicated: rv.NotReplicatedEntries})
		}
	}
	return tv, nil
}

// scanRegion reads the summary of topic name in region, chunk by chunk.
func (svc *Service) scanRegion(ctx context.Context, region, name string, run verifyRun) (*regionScan, error) {
	sc := &regionScan{region: region, held: map[string][]replicator.HeldRun{}}
	req := &replpb.VerifyRequest{Source: svc.cfg.Cluster, Topic: name, MaxEntries: verifyChunkEntries, SettleMs: run.settle.Milliseconds()}
	for first := true; ; first = false {
		resp, err := svc.callVerify(ctx, sc, req)
		if err != nil {
			return nil, err
		}
		if first {
			sc.localSeq, sc.bases = resp.LocalSeq, resp.StreamBase
			req.Until, req.AsOfMs = resp.Until, resp.AsOfMs
		}
		if resp.FirstUnsettled > 0 && (sc.firstUnsettled == 0 || resp.FirstUnsettled < sc.firstUnsettled) {
			sc.firstUnsettled = resp.FirstUnsettled
		}
		sc.unreadable += resp.Unreadable
		read := int(resp.Unreadable)
		for _, r := range resp.Runs {
			sc.held[r.Origin] = append(sc.held[r.Origin], replicator.HeldRun{
				From: r.From, To: r.To, FirstID: fromPBID(r.FirstId), At: fromPBPos(r.At), Digest: r.Digest})
			read += int(r.To - r.From + 1)
		}
		if run.pace != nil {
			if err := run.pace(ctx, read); err != nil {
				return nil, err
			}
		}
		if resp.Done {
			return sc, nil
		}
		req.After = resp.Next
	}
}

// detailRead reads the entries of one bucket of origin's entries in the
// region of sc.
func (svc *Service) detailRead(ctx context.Context, sc *regionScan, name, origin string, need replicator.DetailRequest, run verifyRun) ([]replicator.EntryDigest, error) {
	req := &replpb.VerifyRequest{Source: svc.cfg.Cluster, Topic: name, MaxEntries: verifyChunkEntries,
		After:        toPBPos(replicator.Position{Ledger: need.At.Ledger, Entry: need.At.Entry - 1}),
		DetailOrigin: origin, DetailFrom: need.From, DetailTo: need.To}
	var out []replicator.EntryDigest
	for {
		resp, err := svc.callVerify(ctx, sc, req)
		if err != nil {
			return nil, err
		}
		req.Until = resp.Until
		for _, e := range resp.Entries {
			out = append(out, replicator.EntryDigest{Seq: e.Seq, ID: fromPBID(e.Id), Digest: e.Digest})
		}
		if run.pace != nil {
			if err := run.pace(ctx, len(resp.Entries)); err != nil {
				return nil, err
			}
		}
		if resp.Done {
			return out, nil
		}
		req.After = resp.Next
	}
}

// callVerify sends req to the topic's owner in sc's region: to the
// address known, or through any registered broker of the region,
// following redirects.
func (svc *Service) callVerify(ctx context.Context, sc *regionScan, req *replpb.VerifyRequest) (*replpb.VerifyResponse, error) {
	addrs := []string{sc.addr}
	if sc.addr == "" {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		eps, err := svc.endpoints(ectx, sc.region)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list the endpoints of region %s: %w", sc.region, err)
		}
		if len(eps) == 0 {
			return nil, fmt.Errorf("region %s has no registered broker", sc.region)
		}
		addrs = slices.Clone(eps)
		rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	}
	var lastErr error
	for _, addr := range addrs {
		for range 4 { // redirects
			conn, err := svc.dialer.Conn(addr)
			if err != nil {
				lastErr = err
				break
			}
			cctx, cancel := context.WithTimeout(ctx, verifyCallTimeout)
			resp, err := replpb.NewReplicationClient(conn).Verify(cctx, req)
			cancel()
			if err != nil {
				lastErr = fmt.Errorf("region %s, broker %s: %w", sc.region, addr, err)
				if sc.addr != "" {
					// The owner moved or died: ask the region again.
					sc.addr = ""
					return svc.callVerify(ctx, sc, req)
				}
				break
			}
			if resp.Redirect != "" {
				addr = resp.Redirect
				continue
			}
			sc.addr = addr
			return resp, nil
		}
	}
	if lastErr == nil {
		lastErr = errors.New("too many redirects")
	}
	return nil, lastErr
}

// Verify serves one chunk of a verification (repl.proto).
func (svc *Service) Verify(ctx context.Context, req *replpb.VerifyRequest) (*replpb.VerifyResponse, error) {
	if svc.cfg.Authorize != nil {
		if err := svc.cfg.Authorize(ctx, req.Source); err != nil {
			return nil, err
		}
	}
	tn, err := meta.ParseTopic(req.Topic)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "verify: %v", err)
	}
	pol, err := svc.cfg.Meta.GetPolicies(ctx, tn.NamespaceName())
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "verify: namespace %s: %v", tn.NamespaceName(), err)
		}
		return nil, status.Errorf(codes.Unavailable, "verify: namespace %s: %v", tn.NamespaceName(), err)
	}
	if !slices.Contains(pol.ReplicationClusters, req.Source) || !slices.Contains(pol.ReplicationClusters, svc.cfg.Cluster) {
		return nil, status.Errorf(codes.PermissionDenied, "verify: namespace %s replicates between %v: region %s may not read region %s's copy", tn.NamespaceName(), pol.ReplicationClusters, req.Source, svc.cfg.Cluster)
	}
	t, redirect, err := svc.host.Target(ctx, tn, pol)
	switch {
	case redirect != "":
		return &replpb.VerifyResponse{Redirect: redirect, Region: svc.cfg.Cluster}, nil
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "verify: %v", err)
	}
	if req.Positions {
		return t.positionsAnswer(), nil
	}
	resp, err := t.verifyChunk(ctx, req)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "verify %s: %v", tn, err)
	}
	return resp, nil
}

// verifyChunk reads one chunk of the topic's log for a verification: the
// summary (runs per origin), or the entries of a detail read. It reads
// from the managed ledger like any reader, off the append path.
func (t *Topic) verifyChunk(ctx context.Context, req *replpb.VerifyRequest) (*replpb.VerifyResponse, error) {
	local := t.svc.cfg.Cluster
	resp := &replpb.VerifyResponse{Region: local, AsOfMs: req.AsOfMs, Until: req.Until}
	if req.Until == nil {
		last, seq, _ := t.log.End()
		resp.Until, resp.LocalSeq = toPBPos(toReplPos(last)), seq
		resp.StreamBase = map[string]uint64{}
		for _, st := range t.senderStatus() {
			resp.StreamBase[st.Remote] = st.StreamBase
		}
	}
	if resp.AsOfMs == 0 {
		resp.AsOfMs = t.svc.clock.Now().UnixMilli()
	}
	until := toMLPos(fromPBPos(resp.Until))
	after := mledger.Earliest
	if req.After != nil {
		after = toMLPos(fromPBPos(req.After))
	}
	resp.Next = toPBPos(toReplPos(after))
	from := t.ml.Next(after)
	if until.Less(from) {
		resp.Done = true
		return resp, nil
	}
	n := int(req.MaxEntries)
	if n <= 0 || n > verifyChunkEntries {
		n = verifyChunkEntries
	}
	es, err := t.ml.ReadEntries(ctx, from, n, verifyChunkBytes)
	if err != nil && len(es) == 0 {
		return nil, err
	}
	detail := req.DetailOrigin != ""
	settledBefore := resp.AsOfMs - req.SettleMs
	builders := map[string]*replicator.RunBuilder{}
	var origins []string
	for _, e := range es {
		if until.Less(e.Pos) {
			resp.Done = true
			break
		}
		resp.Next = toPBPos(toReplPos(e.Pos))
		d, derr := entry.Decode(e.Data)
		origin, id := d.Origin.Region, d.Origin.ID
		if origin == "" {
			origin, id = local, e.Pos
		}
		if derr != nil || d.Origin.Seq == 0 {
			resp.Unreadable++
			continue
		}
		seq := d.Origin.Seq
		if origin == local && req.SettleMs > 0 && d.PublishMs > settledBefore && resp.FirstUnsettled == 0 {
			resp.FirstUnsettled = seq
		}
		if detail {
			if origin != req.DetailOrigin || seq < req.DetailFrom {
				continue
			}
			if seq > req.DetailTo {
				resp.Done = true
				break
			}
		}
		dg := entryDigest(origin, seq, id.Ledger, id.Entry, d)
		if detail {
			resp.Entries = append(resp.Entries, &replpb.VerifyEntry{Seq: seq, Id: &replpb.MessageId{Ledger: id.Ledger, Entry: id.Entry, Batch: -1}, Digest: dg})
			continue
		}
		b := builders[origin]
		if b == nil {
			b = &replicator.RunBuilder{}
			builders[origin] = b
			origins = append(origins, origin)
		}
		b.Add(seq, replicator.MessageID{Ledger: id.Ledger, Entry: id.Entry, Batch: -1}, toReplPos(e.Pos), dg)
	}
	if len(es) == 0 || fromPBPos(resp.Next) == toReplPos(until) {
		resp.Done = true
	}
	for _, o := range origins {
		for _, r := range builders[o].Runs() {
			resp.Runs = append(resp.Runs, &replpb.VerifyRun{Origin: o, From: r.From, To: r.To,
				FirstId: &replpb.MessageId{Ledger: r.FirstID.Ledger, Entry: r.FirstID.Entry, Batch: -1}, At: toPBPos(r.At), Digest: r.Digest})
		}
	}
	return resp, nil
}

func toPBPos(p replicator.Position) *replpb.MessageId {
	return &replpb.MessageId{Ledger: p.Ledger, Entry: p.Entry, Batch: -1}
}

func fromPBPos(m *replpb.MessageId) replicator.Position {
	if m == nil {
		return replicator.Earliest
	}
	return replicator.Position{Ledger: m.GetLedger(), Entry: m.GetEntry()}
}

func fromPBID(m *replpb.MessageId) replicator.MessageID {
	return replicator.MessageID{Ledger: m.GetLedger(), Entry: m.GetEntry(), Batch: -1}
}
