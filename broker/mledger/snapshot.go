package mledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/mlpb"
	"google.golang.org/protobuf/proto"
)

// A snapshot is a blob of any size kept for a managed ledger: state its
// owner rebuilds faster from a snapshot than from the log (the broker's
// deduplication state; a delayed-delivery index). etcd caps a request at
// 1.5 MiB, so the blob is written as the entries of a ledger of its own,
// placed like the managed ledger's ledgers (same quorums, placement and
// Adjust), and a small record in etcd points to it:
//
//	/managed-ledgers/<name>/snapshots/<snapshot>  SnapshotRecord (proto/mlpb)
//
// A blob of at most SnapshotOptions.InlineMaxBytes lives in the record
// itself (one etcd write, no ledger).
//
// # Ordering contract
//
// Persist the ledger before pointing to it; point before deleting the old.
// A write (Snapshot.Write) runs these steps, each only after the one
// before succeeded:
//
//  1. Reserve: record the new ledger's id in the record's garbage list,
//     before the ledger exists (ledger.CreateOptions.Reserve, between the
//     id's allocation and the ledger's metadata).
//  2. Create the ledger; delete the garbage the record listed before step
//     1 (see "Garbage").
//  3. Append the blob in chunks of ChunkBytes, then close the ledger: its
//     entries are on the ack quorum and its end is in its metadata.
//  4. Point: compare-and-swap the record to the new ledger (version,
//     entries, size, CRC-32C), moving the previous ledger to garbage.
//  5. Delete the previous ledger.
//
// A crash before step 4 leaves the record pointing to the previous blob
// (still readable: nothing it points to is deleted before step 5); a crash
// after it, to the new one. No crash leaves a ledger that the record does
// not list, as the one it points to or as garbage.
//
// Every write of the record is a transaction that also compares the
// managed ledger's list record (as cursor writes do), so once another
// owner opened the managed ledger, an earlier owner's snapshot writes
// fail with ErrFenced (and fence it).
//
// # Garbage
//
// A listed garbage ledger is deleted only after a write of the record
// that lists it has been committed by this owner, or at OpenSnapshot
// (the managed ledger's Open has claimed it since every earlier write):
// from then on no write that was still in flight (etcd may apply a
// request after answering "request timed out") can make the record point
// to it. Garbage is deleted by the next Write and by the first
// OpenSnapshot of each managed-ledger owner; ledgers deleted are dropped
// from the list by the next write.
//
// Delete the managed ledger (ManagedLedger.Delete) deletes its snapshots'
// ledgers with it.

// Errors of snapshots; match with errors.Is.
var (
	// ErrNoSnapshot: Read of a snapshot never written (or deleted).
	ErrNoSnapshot = errors.New("mledger: no snapshot")
	// ErrSnapshotCorrupt: the blob read back does not match its record
	// (size, entry count or CRC-32C), or the ledger the record points to
	// has no metadata. The caller rebuilds the state another way.
	ErrSnapshotCorrupt = errors.New("mledger: snapshot corrupt")
)

// SnapshotFormatVersion is the version of the SnapshotRecord this code
// writes; it refuses to read a record of a higher version.
const SnapshotFormatVersion = 1

// SnapshotOptions configure a Snapshot.
type SnapshotOptions struct {
	// ChunkBytes: the blob is written as entries of at most this many
	// bytes. Default 1 MiB: well under the entry limit of the ledger
	// client and the bookies (5 MiB + 64 KiB by default), and small enough
	// that a chunk is one quick gRPC message. A 5 MiB blob is 5 entries.
	ChunkBytes int
	// InlineMaxBytes: a blob of at most this many bytes is kept in the
	// record itself: one etcd write instead of a ledger's creation, close
	// and deletion (about six etcd writes and one bookie write per
	// snapshot). Default 64 KiB; at most 512 KiB (etcd caps a request at
	// 1.5 MiB); -1: always a ledger.
	InlineMaxBytes int

	// crash, if set (tests), runs before each step of Write with the
	// step's name; an error stops Write there as a crash would: nothing
	// after it runs and nothing is cleaned up.
	crash func(step string) error
}

// Steps of Snapshot.Write, as its crash hook names them.
const (
	stepReserve = "reserve" // before recording the new ledger's id as garbage
	stepCreate  = "create"  // after recording it, before the ledger's metadata
	stepAppend  = "append"  // the ledger exists, before its first entry
	stepClose   = "close"   // every entry acknowledged, before closing the ledger
	stepPoint   = "point"   // the blob is persisted, before the record points to it
	stepDelete  = "delete"  // the record points to it, before the old ledger is deleted
)

const maxInlineBytes = 512 << 10

func (o SnapshotOptions) withDefaults() (SnapshotOptions, error) {
	if o.ChunkBytes == 0 {
		o.ChunkBytes = 1 << 20
	}
	if o.InlineMaxBytes == 0 {
		o.InlineMaxBytes = 64 << 10
	}
	if o.ChunkBytes < 0 {
		return o, fmt.Errorf("mledger: SnapshotOptions.ChunkBytes %d must be > 0", o.ChunkBytes)
	}
	if o.InlineMaxBytes < -1 || o.InlineMaxBytes > maxInlineBytes {
		return o, fmt.Errorf("mledger: SnapshotOptions.InlineMaxBytes %d must be -1 or in [0, %d]", o.InlineMaxBytes, maxInlineBytes)
	}
	return o, nil
}

// SnapshotInfo describes a snapshot as its record does.
type SnapshotInfo struct {
	// Version is incremented by every Write (1 for the first).
	Version uint64
	// Ledger holds the blob (0: the blob is inline in the record); Entries
	// is its entry count.
	Ledger, Entries int64
	SizeBytes       int64
	CRC32C          uint32
	Written         time.Time
}

// Snapshot is one named snapshot of a managed ledger. Safe for concurrent
// use; its operations run one at a time.
type Snapshot struct {
	ml   *ManagedLedger
	name string
	key  string
	o    SnapshotOptions

	mu sync.Mutex
	// cleared: garbage ledgers deleted after the record was at
	// clearedRev, which the next write drops from the list if the record
	// is still at that revision.
	cleared    map[int64]bool
	clearedRev int64
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

func snapshotsDir(name string) string { return mlDir(name) + "snapshots/" }

func snapshotKey(name, snap string) string { return snapshotsDir(name) + EscapeName(snap) }

// OpenSnapshot returns the managed ledger's snapshot name (a record under
// its keys; see "Snapshots" in snapshot.go). The first OpenSnapshot of a
// name by this owner deletes the garbage the record lists; later ones
// return the same Snapshot (o is then ignored).
func (ml *ManagedLedger) OpenSnapshot(ctx context.Context, name string, o SnapshotOptions) (*Snapshot, error) {
	if name == "" {
		return nil, errors.New("mledger: empty snapshot name")
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	ml.snapMu.Lock()
	defer ml.snapMu.Unlock()
	if s := ml.snapshots[name]; s != nil {
		return s, nil
	}
	s := &Snapshot{ml: ml, name: name, key: snapshotKey(ml.name, name), o: o}
	rec, rev, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	// Open claimed the managed ledger after every write of an earlier
	// owner, and this owner has written nothing yet: nothing can make the
	// record point to its garbage any more.
	s.cleared, s.clearedRev = s.deleteLedgers(ctx, garbageOf(rec, false), "open"), rev
	if ml.snapshots == nil {
		ml.snapshots = map[string]*Snapshot{}
	}
	ml.snapshots[name] = s
	return s, nil
}

// Name returns the snapshot's name.
func (s *Snapshot) Name() string { return s.name }

// get reads the record: an empty one at revision 0 when absent.
func (s *Snapshot) get(ctx context.Context) (*mlpb.SnapshotRecord, int64, error) {
	actx, cancel := context.WithTimeout(ctx, etcdAttemptTimeout)
	defer cancel()
	kv, err := s.ml.store.Get(actx, s.key)
	if errors.Is(err, cluster.ErrNotFound) {
		return &mlpb.SnapshotRecord{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("mledger: %s: read snapshot %s: %w", s.ml.name, s.name, err)
	}
	rec := &mlpb.SnapshotRecord{}
	if err := proto.Unmarshal(kv.Value, rec); err != nil {
		return nil, 0, fmt.Errorf("%w: %s: record %s: %v", ErrSnapshotCorrupt, s.ml.name, s.key, err)
	}
	if rec.FormatVersion > SnapshotFormatVersion {
		return nil, 0, fmt.Errorf("mledger: record %s has format version %d, this build knows up to %d", s.key, rec.FormatVersion, SnapshotFormatVersion)
	}
	return rec, kv.ModRevision, nil
}

// garbageOf returns the ledgers the record lists as garbage (never the one
// it points to), with that one too if withCurrent.
func garbageOf(rec *mlpb.SnapshotRecord, withCurrent bool) []int64 {
	var out []int64
	for _, id := range rec.Garbage {
		if id != rec.LedgerId && id != 0 && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	if withCurrent && rec.LedgerId != 0 && !slices.Contains(out, rec.LedgerId) {
		out = append(out, rec.LedgerId)
	}
	return out
}

// pendingGarbage is the record's garbage less what this Snapshot deleted
// when the record was last at rev.
func (s *Snapshot) pendingGarbage(rec *mlpb.SnapshotRecord, rev int64) []int64 {
	g := garbageOf(rec, false)
	if rev != s.clearedRev || len(s.cleared) == 0 {
		return g
	}
	return slices.DeleteFunc(g, func(id int64) bool { return s.cleared[id] })
}

// deleteLedgers deletes ledgers' metadata (a missing one counts as
// deleted) and returns those deleted. Failures are logged: the ledgers
// stay listed, and the next write or open deletes them.
func (s *Snapshot) deleteLedgers(ctx context.Context, ids []int64, why string) map[int64]bool {
	done := make(map[int64]bool, len(ids))
	for _, id := range ids {
		actx, cancel := context.WithTimeout(ctx, etcdAttemptTimeout)
		err := ledger.DeleteLedger(actx, s.ml.store, id)
		cancel()
		if err != nil {
			s.ml.log.Warn("snapshot: could not delete a garbage ledger; the next write or open does", "snapshot", s.name, "ledger", id, "at", why, "err", err)
			continue
		}
		done[id] = true
	}
	return done
}

// cas writes rec at the record's revision rev (0: absent) in a
// transaction that also compares the managed ledger's list record, and
// returns the new revision. A write whose answer was lost is read back:
// if the record holds rec, it landed. ErrFenced (another owner) fences the
// managed ledger. Any other error leaves the outcome unknown: rec may yet
// land, so nothing it lists may be deleted before a later write of the
// record is committed.
func (s *Snapshot) cas(ctx context.Context, rev int64, rec *mlpb.SnapshotRecord) (int64, error) {
	rec.FormatVersion = SnapshotFormatVersion
	val, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return 0, err
	}
	ml := s.ml
	ml.metaMu.Lock()
	newRev, err := ml.fencedWriteLocked(ctx, s.key, rev, val, false)
	ml.metaMu.Unlock()
	if err == nil {
		return newRev, nil
	}
	if errors.Is(err, ErrFenced) {
		ml.fence(err)
		return 0, err
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), etcdAttemptTimeout)
	defer cancel()
	if kv, gerr := ml.store.Get(actx, s.key); gerr == nil && bytes.Equal(kv.Value, val) {
		ml.log.Info("snapshot: a record write whose answer was lost had landed", "snapshot", s.name, "rev", kv.ModRevision, "err", err)
		return kv.ModRevision, nil
	}
	return 0, fmt.Errorf("mledger: %s: write snapshot %s: %w", ml.name, s.name, err)
}

func (s *Snapshot) step(name string) error {
	if s.o.crash == nil {
		return nil
	}
	return s.o.crash(name)
}

// Write replaces the snapshot with data, in the order of the contract
// above, and returns the new record's description. On an error the
// previous snapshot is what Read returns — or, when the last write of the
// record had an unknown outcome, possibly the new one; either is whole.
// ErrFenced: another owner opened the managed ledger. Writes to a closed
// managed ledger are allowed (a topic writes its last snapshot after
// closing its log); they are fenced as before.
func (s *Snapshot) Write(ctx context.Context, data []byte) (SnapshotInfo, error) {
	var chunks [][]byte
	for off := 0; off < len(data) || len(chunks) == 0; off += s.o.ChunkBytes {
		chunks = append(chunks, data[off:min(off+s.o.ChunkBytes, len(data))])
	}
	return s.write(ctx, data, chunks, s.o.InlineMaxBytes >= 0 && len(data) <= s.o.InlineMaxBytes)
}

// WriteSegments replaces the snapshot with a blob made of segments, each
// written as one entry of the snapshot's ledger (never inline), so that
// ReadSegment reads one back alone: an immutable blob that its owner
// loads piece by piece (a delayed-delivery bucket: the segment due next
// in memory, the later ones on the bookies). Read returns their
// concatenation. Each segment must fit one ledger entry (at most the
// ledger client's entry limit, 5 MiB by default); an empty list writes
// one empty segment. Same contract and errors as Write.
func (s *Snapshot) WriteSegments(ctx context.Context, segments [][]byte) (SnapshotInfo, error) {
	if len(segments) == 0 {
		segments = [][]byte{nil}
	}
	return s.write(ctx, bytes.Join(segments, nil), segments, false)
}

// write persists data, made of chunks (one ledger entry each), inline in
// the record if inline.
func (s *Snapshot) write(ctx context.Context, data []byte, chunkList [][]byte, inline bool) (SnapshotInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, rev, err := s.get(ctx)
	if err != nil {
		return SnapshotInfo{}, err
	}
	next := &mlpb.SnapshotRecord{
		Version:   rec.Version + 1,
		SizeBytes: int64(len(data)),
		Crc32C:    crc32.Checksum(data, crc32c),
		WrittenMs: s.ml.now().UnixMilli(),
	}
	garbage := s.pendingGarbage(rec, rev)
	if inline {
		next.Inline = data
		if rec.LedgerId != 0 {
			garbage = append(garbage, rec.LedgerId)
		}
		next.Garbage = garbage
		if err := s.step(stepPoint); err != nil {
			return SnapshotInfo{}, err
		}
		newRev, err := s.cas(ctx, rev, next)
		if err != nil {
			return SnapshotInfo{}, err
		}
		if err := s.step(stepDelete); err != nil {
			return SnapshotInfo{}, err
		}
		s.cleared, s.clearedRev = s.deleteLedgers(ctx, garbage, "write"), newRev
		return infoOf(next), nil
	}

	// 1-2. Reserve the new ledger's id, then create the ledger.
	var reservedRev int64
	o := s.ml.createOptions()
	o.Custom = maps.Clone(o.Custom)
	if o.Custom == nil {
		o.Custom = map[string]string{}
	}
	o.Custom["managed-ledger"] = s.ml.name
	o.Custom["snapshot"] = s.name
	o.Reserve = func(ctx context.Context, id int64) error {
		if err := s.step(stepReserve); err != nil {
			return err
		}
		r := proto.Clone(rec).(*mlpb.SnapshotRecord)
		r.Garbage = append(slices.Clone(garbage), id)
		newRev, err := s.cas(ctx, rev, r)
		if err != nil {
			return err
		}
		reservedRev = newRev
		return s.step(stepCreate)
	}
	w, err := s.ml.lc.Create(ctx, o)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("mledger: %s: snapshot %s: create ledger: %w", s.ml.name, s.name, err)
	}
	// The reservation is committed: no write comparing an earlier
	// revision can land any more, so the garbage listed before it can go.
	deleted := s.deleteLedgers(ctx, garbage, "write")
	abandon := func(err error) (SnapshotInfo, error) {
		// Not a crash: release the writer. The ledger stays listed as
		// garbage, for the next write or open to delete.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), etcdAttemptTimeout)
		defer cancel()
		_ = w.Close(cctx)
		return SnapshotInfo{}, fmt.Errorf("mledger: %s: snapshot %s: ledger %d: %w", s.ml.name, s.name, w.ID(), err)
	}

	// 3. Persist the blob.
	if err := s.step(stepAppend); err != nil {
		return SnapshotInfo{}, err
	}
	chunks := len(chunkList)
	errs := make(chan error, chunks)
	for _, c := range chunkList {
		w.AppendAsync(c, func(_ int64, err error) { errs <- err })
	}
	for range chunks {
		select {
		case err := <-errs:
			if err != nil {
				return abandon(err)
			}
		case <-ctx.Done():
			return abandon(ctx.Err())
		}
	}
	if err := s.step(stepClose); err != nil {
		return SnapshotInfo{}, err
	}
	if err := w.Close(ctx); err != nil {
		return abandon(err)
	}

	// 4. Point to it.
	next.LedgerId, next.Entries = w.ID(), int64(chunks)
	next.Garbage = slices.DeleteFunc(slices.Clone(garbage), func(id int64) bool { return deleted[id] })
	if rec.LedgerId != 0 {
		next.Garbage = append(next.Garbage, rec.LedgerId)
	}
	if err := s.step(stepPoint); err != nil {
		return SnapshotInfo{}, err
	}
	newRev, err := s.cas(ctx, reservedRev, next)
	if err != nil {
		return SnapshotInfo{}, err
	}

	// 5. Delete the previous ledger (and garbage left over).
	if err := s.step(stepDelete); err != nil {
		return SnapshotInfo{}, err
	}
	s.cleared, s.clearedRev = s.deleteLedgers(ctx, next.Garbage, "write"), newRev
	return infoOf(next), nil
}

func infoOf(rec *mlpb.SnapshotRecord) SnapshotInfo {
	return SnapshotInfo{Version: rec.Version, Ledger: rec.LedgerId, Entries: rec.Entries, SizeBytes: rec.SizeBytes,
		CRC32C: rec.Crc32C, Written: fromMs(rec.WrittenMs)}
}

// Read returns the snapshot's blob, verified against its record (size,
// entry count, CRC-32C). ErrNoSnapshot: none was written;
// ErrSnapshotCorrupt: what was read does not match. Other errors (etcd or
// bookies unreachable) are worth retrying.
func (s *Snapshot) Read(ctx context.Context) ([]byte, SnapshotInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, _, err := s.get(ctx)
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	if rec.Version == 0 {
		return nil, SnapshotInfo{}, fmt.Errorf("%w: %s: %s", ErrNoSnapshot, s.ml.name, s.name)
	}
	info := infoOf(rec)
	corrupt := func(format string, args ...any) ([]byte, SnapshotInfo, error) {
		return nil, info, fmt.Errorf("%w: %s: %s version %d: %s", ErrSnapshotCorrupt, s.ml.name, s.name, rec.Version, fmt.Sprintf(format, args...))
	}
	data := rec.Inline
	if rec.LedgerId != 0 {
		r, err := s.ml.lc.Open(ctx, rec.LedgerId)
		if errors.Is(err, ledger.ErrNoSuchLedger) {
			return corrupt("ledger %d: %v", rec.LedgerId, err)
		}
		if err != nil {
			return nil, info, fmt.Errorf("mledger: %s: snapshot %s: open ledger %d: %w", s.ml.name, s.name, rec.LedgerId, err)
		}
		if n := r.LastEntry() + 1; n != rec.Entries {
			return corrupt("ledger %d has %d entries, the record says %d", rec.LedgerId, n, rec.Entries)
		}
		data = make([]byte, 0, rec.SizeBytes)
		for e := int64(0); e < rec.Entries; e++ {
			ent, err := r.Read(ctx, e)
			if errors.Is(err, ledger.ErrCorrupt) {
				return corrupt("ledger %d entry %d: %v", rec.LedgerId, e, err)
			}
			if err != nil {
				return nil, info, fmt.Errorf("mledger: %s: snapshot %s: read ledger %d entry %d: %w", s.ml.name, s.name, rec.LedgerId, e, err)
			}
			data = append(data, ent.Payload...)
		}
	}
	if int64(len(data)) != rec.SizeBytes {
		return corrupt("%d bytes, the record says %d", len(data), rec.SizeBytes)
	}
	if c := crc32.Checksum(data, crc32c); c != rec.Crc32C {
		return corrupt("CRC-32C %08x, the record says %08x", c, rec.Crc32C)
	}
	return data, info, nil
}

// ReadSegment returns segment i (from 0) of a snapshot written by
// WriteSegments: the payload of entry i of its ledger, which the ledger
// client verified against its digest. The record's CRC-32C covers the
// whole blob, so it is not checked here: a caller that needs more than
// the digest keeps a checksum in its segments. ErrNoSnapshot: none was
// written; ErrSnapshotCorrupt: the snapshot has no segment i (it is
// inline, or has fewer entries), its ledger is gone, or the entry does not
// match its digest. Other errors are worth retrying.
func (s *Snapshot) ReadSegment(ctx context.Context, i int64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, _, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	if rec.Version == 0 {
		return nil, fmt.Errorf("%w: %s: %s", ErrNoSnapshot, s.ml.name, s.name)
	}
	corrupt := func(format string, args ...any) ([]byte, error) {
		return nil, fmt.Errorf("%w: %s: %s version %d: %s", ErrSnapshotCorrupt, s.ml.name, s.name, rec.Version, fmt.Sprintf(format, args...))
	}
	if rec.LedgerId == 0 || i < 0 || i >= rec.Entries {
		return corrupt("no segment %d (ledger %d, %d entries)", i, rec.LedgerId, rec.Entries)
	}
	r, err := s.ml.lc.Open(ctx, rec.LedgerId)
	if errors.Is(err, ledger.ErrNoSuchLedger) {
		return corrupt("ledger %d: %v", rec.LedgerId, err)
	}
	if err != nil {
		return nil, fmt.Errorf("mledger: %s: snapshot %s: open ledger %d: %w", s.ml.name, s.name, rec.LedgerId, err)
	}
	if n := r.LastEntry() + 1; n != rec.Entries {
		return corrupt("ledger %d has %d entries, the record says %d", rec.LedgerId, n, rec.Entries)
	}
	ent, err := r.Read(ctx, i)
	if errors.Is(err, ledger.ErrCorrupt) {
		return corrupt("ledger %d entry %d: %v", rec.LedgerId, i, err)
	}
	if err != nil {
		return nil, fmt.Errorf("mledger: %s: snapshot %s: read ledger %d entry %d: %w", s.ml.name, s.name, rec.LedgerId, i, err)
	}
	return ent.Payload, nil
}

// ListSnapshots returns the names of the managed ledger's snapshots that
// begin with prefix and have a record (written, or listing garbage), in
// name order: an owner that names its snapshots under a prefix of its own
// finds, after a crash, those it made and no longer points to.
func (ml *ManagedLedger) ListSnapshots(ctx context.Context, prefix string) ([]string, error) {
	actx, cancel := context.WithTimeout(ctx, etcdAttemptTimeout)
	defer cancel()
	dir := snapshotsDir(ml.name)
	kvs, _, err := ml.store.List(actx, dir+EscapeName(prefix))
	if err != nil {
		return nil, fmt.Errorf("mledger: %s: list snapshots: %w", ml.name, err)
	}
	var out []string
	for _, kv := range kvs {
		name, err := UnescapeName(strings.TrimPrefix(kv.Key, dir))
		if err != nil || !strings.HasPrefix(name, prefix) {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

// Delete removes the snapshot: the record first lists every ledger of it
// as garbage, then they are deleted, then the record. A crash in between
// leaves the garbage to the next open.
func (s *Snapshot) Delete(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, rev, err := s.get(ctx)
	if err != nil {
		return err
	}
	if rev == 0 {
		s.forget()
		return nil
	}
	all := garbageOf(rec, true)
	newRev, err := s.cas(ctx, rev, &mlpb.SnapshotRecord{Garbage: all})
	if err != nil {
		return err
	}
	if done := s.deleteLedgers(ctx, all, "delete"); len(done) < len(all) {
		s.cleared, s.clearedRev = done, newRev
		return fmt.Errorf("mledger: %s: delete snapshot %s: some ledgers are left for the next open", s.ml.name, s.name)
	}
	s.ml.metaMu.Lock()
	_, err = s.ml.fencedWriteLocked(ctx, s.key, newRev, nil, true)
	s.ml.metaMu.Unlock()
	if errors.Is(err, ErrFenced) {
		s.ml.fence(err)
	}
	if err != nil {
		return err
	}
	s.cleared, s.clearedRev = nil, 0
	s.forget()
	return nil
}

// forget drops the handle of a deleted snapshot from the managed ledger:
// an owner that makes and deletes many snapshots (delayed-delivery
// buckets) keeps none of the deleted ones. A later OpenSnapshot of the
// name starts afresh.
func (s *Snapshot) forget() {
	s.ml.snapMu.Lock()
	if s.ml.snapshots[s.name] == s {
		delete(s.ml.snapshots, s.name)
	}
	s.ml.snapMu.Unlock()
}

// deleteSnapshotLedgers deletes the ledgers of every snapshot of the
// managed ledger (at Delete, once the list is marked deleting: no owner
// can write a snapshot record any more). Their records go with the
// managed ledger's other keys.
func (ml *ManagedLedger) deleteSnapshotLedgers(ctx context.Context) error {
	kvs, _, err := ml.store.List(ctx, snapshotsDir(ml.name))
	if err != nil {
		return fmt.Errorf("mledger: %s: list snapshots: %w", ml.name, err)
	}
	for _, kv := range kvs {
		rec := &mlpb.SnapshotRecord{}
		if err := proto.Unmarshal(kv.Value, rec); err != nil {
			ml.log.Error("snapshot record unreadable; its ledgers, if any, are left behind", "key", kv.Key, "err", err)
			continue
		}
		for _, id := range garbageOf(rec, true) {
			if err := ledger.DeleteLedger(ctx, ml.store, id); err != nil {
				return fmt.Errorf("mledger: %s: delete snapshot ledger %d: %w", ml.name, id, err)
			}
		}
	}
	return nil
}
