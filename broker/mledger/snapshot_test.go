package mledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/mlpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// snapEnv is a region (etcd, three bookie processes on three racks) in
// which each "process" is a ledger client of its own.
type snapEnv struct {
	t *testing.T
	r *testutil.Region
}

func newSnapEnv(t *testing.T) *snapEnv {
	return &snapEnv{t: t, r: testutil.StartRegion(t, "east", "r1", "r2", "r3")}
}

// process returns a new ledger client, as one broker process has.
func (e *snapEnv) process() *ledger.Client {
	e.t.Helper()
	view, err := cluster.WatchBookies(context.Background(), e.r.Store)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(view.Close)
	c, err := ledger.New(ledger.Config{Store: e.r.Store, Bookies: ledger.ViewSource{View: view}, Region: "east", Rack: "r1", AddTimeout: 3 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// open opens (takes over) the managed ledger name in a new process.
func (e *snapEnv) open(name string) *ManagedLedger {
	e.t.Helper()
	ml, err := Open(e.ctx(), name, Config{Store: e.r.Store, Ledgers: e.process(), RetentionTime: -1})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = ml.Close(ctx)
	})
	return ml
}

func (e *snapEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *snapEnv) snapshot(ml *ManagedLedger, name string, o SnapshotOptions) *Snapshot {
	e.t.Helper()
	s, err := ml.OpenSnapshot(e.ctx(), name, o)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// snapshotLedgers returns the ids of every ledger made for snapshot snap
// of managed ledger mlName that still has metadata.
func (e *snapEnv) snapshotLedgers(mlName, snap string) []int64 {
	e.t.Helper()
	ctx := e.ctx()
	ids, err := ledger.ListLedgers(ctx, e.r.Store)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []int64
	for _, id := range ids {
		m, err := ledger.ReadMetadata(ctx, e.r.Store, id)
		if err != nil {
			e.t.Fatal(err)
		}
		if m.Meta.Custom["snapshot"] == snap && m.Meta.Custom["managed-ledger"] == mlName {
			out = append(out, id)
		}
	}
	return out
}

func blob(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func mustRead(t *testing.T, s *Snapshot, want []byte) SnapshotInfo {
	t.Helper()
	got, info, err := s.Read(context.Background())
	if err != nil {
		t.Fatalf("read snapshot: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (crc %08x), want %d bytes: not the blob written", len(got), info.CRC32C, len(want))
	}
	return info
}

// A 5 MiB snapshot — beyond etcd's 1.5 MiB request limit, which the
// broker's deduplication snapshot ran into ("request is too large") — is
// written as entries of a ledger placed like the managed ledger's, behind
// a record of a few bytes, and read back whole by the next owner.
func TestSnapshotRoundTripBeyondEtcdRequestLimit(t *testing.T) {
	e := newSnapEnv(t)
	ml := e.open("tenant/ns/persistent/big")
	s := e.snapshot(ml, "dedup", SnapshotOptions{})
	data := blob(1, 5<<20)
	info, err := s.Write(e.ctx(), data)
	if err != nil {
		t.Fatal(err)
	}
	if info.Ledger == 0 || info.Entries != 5 || info.SizeBytes != 5<<20 || info.Version != 1 {
		t.Fatalf("info %+v: want ledger != 0, 5 entries of 1 MiB, version 1", info)
	}
	kv, err := e.r.Store.Get(e.ctx(), snapshotKey(ml.Name(), "dedup"))
	if err != nil {
		t.Fatal(err)
	}
	if len(kv.Value) > 100 {
		t.Fatalf("the etcd record is %d bytes, want a pointer of a few", len(kv.Value))
	}
	m, err := ledger.ReadMetadata(e.ctx(), e.r.Store, info.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	if mm := m.Meta; mm.EnsembleSize != 3 || mm.WriteQuorum != 3 || mm.AckQuorum != 2 || mm.State.String() != "CLOSED" || mm.LastEntryId != 4 {
		t.Fatalf("snapshot ledger E=%d Qw=%d Qa=%d %s last %d: want the managed ledger's 3/3/2, closed at entry 4",
			mm.EnsembleSize, mm.WriteQuorum, mm.AckQuorum, mm.State, mm.LastEntryId)
	}
	mustRead(t, s, data)

	// The next owner (another process) reads it.
	next := e.open("tenant/ns/persistent/big")
	if got := mustRead(t, e.snapshot(next, "dedup", SnapshotOptions{}), data); got != info {
		t.Fatalf("the next owner read %+v, want %+v", got, info)
	}

	// A small blob lives in the record; the ledger goes.
	small := []byte("small")
	s2 := e.snapshot(next, "dedup", SnapshotOptions{})
	if info, err := s2.Write(e.ctx(), small); err != nil || info.Ledger != 0 || info.Version != 2 {
		t.Fatalf("inline write: %+v, %v", info, err)
	}
	mustRead(t, s2, small)
	if ids := e.snapshotLedgers(ml.Name(), "dedup"); len(ids) != 0 {
		t.Fatalf("ledgers %v left after the snapshot moved inline", ids)
	}
}

// After a successful swap the previous snapshot's ledger is deleted: a
// managed ledger keeps one snapshot ledger per snapshot, however often it
// writes.
func TestSnapshotSwapDeletesTheOldLedger(t *testing.T) {
	e := newSnapEnv(t)
	ml := e.open("tenant/ns/persistent/swap")
	s := e.snapshot(ml, "idx", SnapshotOptions{ChunkBytes: 64 << 10, InlineMaxBytes: -1})
	var prev int64
	for i := range 4 {
		data := blob(uint64(i), 200<<10)
		info, err := s.Write(e.ctx(), data)
		if err != nil {
			t.Fatal(err)
		}
		if info.Entries != 4 {
			t.Fatalf("write %d: %d entries, want 4 of 64 KiB", i, info.Entries)
		}
		mustRead(t, s, data)
		if prev != 0 {
			if _, err := ledger.ReadMetadata(e.ctx(), e.r.Store, prev); !errors.Is(err, ledger.ErrNoSuchLedger) {
				t.Fatalf("write %d: the previous snapshot ledger %d: err = %v, want it deleted", i, prev, err)
			}
		}
		if ids := e.snapshotLedgers(ml.Name(), "idx"); !slices.Equal(ids, []int64{info.Ledger}) {
			t.Fatalf("write %d: snapshot ledgers %v, want only %d", i, ids, info.Ledger)
		}
		prev = info.Ledger
	}
}

var errCrash = errors.New("crash (test)")

// A crash at any step of a write leaves the previous snapshot readable
// (before the record points to the new ledger) or the new one (after),
// and the next owner's open deletes every snapshot ledger the record does
// not point to: none leaks, whatever step the crash hit.
func TestSnapshotCrashAtEachStepLeavesOneReadable(t *testing.T) {
	e := newSnapEnv(t)
	old := blob(10, 300<<10)
	for i, c := range []struct {
		step   string
		inline bool // the new blob is small enough for the record
		newer  bool // the crash came after the record pointed to the new blob
	}{
		{stepReserve, false, false},
		{stepCreate, false, false},
		{stepAppend, false, false},
		{stepClose, false, false},
		{stepPoint, false, false},
		{stepDelete, false, true},
		{stepPoint, true, false},
		{stepDelete, true, true},
	} {
		t.Run(fmt.Sprintf("%s/inline=%v", c.step, c.inline), func(t *testing.T) {
			name := fmt.Sprintf("tenant/ns/persistent/crash-%d", i)
			ml := e.open(name)
			s := e.snapshot(ml, "dedup", SnapshotOptions{ChunkBytes: 100 << 10})
			if _, err := s.Write(e.ctx(), old); err != nil {
				t.Fatal(err)
			}
			newer := blob(20, 250<<10)
			if c.inline {
				newer = []byte("newer, inline")
			}
			s.o.crash = func(step string) error {
				if step == c.step {
					return errCrash
				}
				return nil
			}
			if _, err := s.Write(e.ctx(), newer); !errors.Is(err, errCrash) {
				t.Fatalf("write crashing at %s: err = %v", c.step, err)
			}

			// The process is gone; another one takes the managed ledger over.
			next := e.open(name)
			s2 := e.snapshot(next, "dedup", SnapshotOptions{})
			want := old
			if c.newer {
				want = newer
			}
			info := mustRead(t, s2, want)
			var wantLedgers []int64
			if info.Ledger != 0 {
				wantLedgers = []int64{info.Ledger}
			}
			if ids := e.snapshotLedgers(name, "dedup"); !slices.Equal(ids, wantLedgers) {
				t.Fatalf("after the crash at %s and an open: snapshot ledgers %v, want %v (the one the record points to)", c.step, ids, wantLedgers)
			}
			// And the snapshot goes on.
			third := blob(30, 150<<10)
			info, err := s2.Write(e.ctx(), third)
			if err != nil {
				t.Fatal(err)
			}
			mustRead(t, s2, third)
			if ids := e.snapshotLedgers(name, "dedup"); !slices.Equal(ids, []int64{info.Ledger}) {
				t.Fatalf("after the next write: snapshot ledgers %v, want %d", ids, info.Ledger)
			}
			if kv, err := e.r.Store.Get(e.ctx(), snapshotKey(name, "dedup")); err == nil {
				rec := &mlpb.SnapshotRecord{}
				if err := proto.Unmarshal(kv.Value, rec); err != nil {
					t.Fatal(err)
				}
				if len(rec.Garbage) > 1 {
					t.Fatalf("the record still lists garbage %v: deleted ledgers are not dropped from the list", rec.Garbage)
				}
			}
		})
	}
}

// Once another owner opened the managed ledger, an earlier owner's write
// fails with ErrFenced before it creates anything, and the snapshot is
// the one the new owner sees.
func TestSnapshotWriteOfAStaleOwnerIsFenced(t *testing.T) {
	e := newSnapEnv(t)
	name := "tenant/ns/persistent/fenced"
	stale := e.open(name)
	s := e.snapshot(stale, "dedup", SnapshotOptions{})
	first := blob(1, 100<<10)
	info, err := s.Write(e.ctx(), first)
	if err != nil {
		t.Fatal(err)
	}
	owner := e.open(name)
	if _, err := s.Write(e.ctx(), blob(2, 100<<10)); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale owner's write: err = %v, want ErrFenced", err)
	}
	if _, err := s.Write(e.ctx(), []byte("inline")); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale owner's inline write: err = %v, want ErrFenced", err)
	}
	mustRead(t, e.snapshot(owner, "dedup", SnapshotOptions{}), first)
	if ids := e.snapshotLedgers(name, "dedup"); !slices.Equal(ids, []int64{info.Ledger}) {
		t.Fatalf("snapshot ledgers %v, want only %d", ids, info.Ledger)
	}
}

// Read verifies the blob against its record; Delete, and deleting the
// managed ledger, remove the snapshot's ledgers with its record.
func TestSnapshotVerifyAndDelete(t *testing.T) {
	e := newSnapEnv(t)
	name := "tenant/ns/persistent/del"
	ml := e.open(name)
	s := e.snapshot(ml, "a", SnapshotOptions{})
	if _, _, err := s.Read(e.ctx()); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("read before any write: err = %v, want ErrNoSnapshot", err)
	}
	info, err := s.Write(e.ctx(), blob(1, 100<<10))
	if err != nil {
		t.Fatal(err)
	}
	// A record whose checksum does not match what the ledger holds.
	kv, err := e.r.Store.Get(e.ctx(), snapshotKey(name, "a"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &mlpb.SnapshotRecord{}
	if err := proto.Unmarshal(kv.Value, rec); err != nil {
		t.Fatal(err)
	}
	rec.Crc32C ^= 1
	b, _ := proto.Marshal(rec)
	if _, err := e.r.Store.Put(e.ctx(), snapshotKey(name, "a"), b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Read(e.ctx()); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("read with a wrong checksum: err = %v, want ErrSnapshotCorrupt", err)
	}
	ml.Close(e.ctx())

	ml = e.open(name)
	s = e.snapshot(ml, "a", SnapshotOptions{})
	if err := s.Delete(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.ReadMetadata(e.ctx(), e.r.Store, info.Ledger); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("ledger %d after Delete: err = %v", info.Ledger, err)
	}
	if _, _, err := s.Read(e.ctx()); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("read after Delete: err = %v, want ErrNoSnapshot", err)
	}

	info, err = e.snapshot(ml, "b", SnapshotOptions{}).Write(e.ctx(), blob(2, 100<<10))
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Delete(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if ids := e.snapshotLedgers(name, "b"); len(ids) != 0 {
		t.Fatalf("snapshot ledgers %v left after the managed ledger was deleted", ids)
	}
	if kvs, _, err := e.r.Store.List(e.ctx(), snapshotsDir(name)); err != nil || len(kvs) != 0 {
		t.Fatalf("snapshot records after the managed ledger was deleted: %d, %v", len(kvs), err)
	}
}

// A segmented snapshot (a delayed-delivery bucket) is read back one
// segment at a time and whole; the segments of other names are listed by
// prefix; a deleted one is forgotten by the managed ledger.
func TestSnapshotSegmentsReadOneAtATimeAndListByPrefix(t *testing.T) {
	e := newSnapEnv(t)
	name := "tenant/ns/persistent/segs"
	ml := e.open(name)
	segs := [][]byte{blob(1, 10), nil, blob(2, 70<<10), blob(3, 1)}
	s := e.snapshot(ml, "delayed/s%2F1/b1", SnapshotOptions{})
	info, err := s.WriteSegments(e.ctx(), segs)
	if err != nil {
		t.Fatal(err)
	}
	if info.Ledger == 0 || info.Entries != int64(len(segs)) {
		t.Fatalf("segments written as %+v, want a ledger of %d entries (never inline)", info, len(segs))
	}
	for i, want := range segs {
		got, err := s.ReadSegment(e.ctx(), int64(i))
		if err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("segment %d: %d bytes, want %d", i, len(got), len(want))
		}
	}
	mustRead(t, s, bytes.Join(segs, nil))
	if _, err := s.ReadSegment(e.ctx(), int64(len(segs))); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("segment past the end: err = %v, want ErrSnapshotCorrupt", err)
	}
	inline := e.snapshot(ml, "delayed/s%2F1/list", SnapshotOptions{})
	if _, err := inline.Write(e.ctx(), []byte("small")); err != nil {
		t.Fatal(err)
	}
	if _, err := inline.ReadSegment(e.ctx(), 0); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("segment of an inline snapshot: err = %v, want ErrSnapshotCorrupt", err)
	}
	if _, err := e.snapshot(ml, "delayed/s/b1", SnapshotOptions{}).Write(e.ctx(), []byte("other")); err != nil {
		t.Fatal(err)
	}
	got, err := ml.ListSnapshots(e.ctx(), "delayed/s%2F1/")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"delayed/s%2F1/b1", "delayed/s%2F1/list"}; !slices.Equal(got, want) {
		t.Fatalf("ListSnapshots = %q, want %q", got, want)
	}
	if err := s.Delete(e.ctx()); err != nil {
		t.Fatal(err)
	}
	ml.snapMu.Lock()
	_, kept := ml.snapshots[s.Name()]
	ml.snapMu.Unlock()
	if kept {
		t.Fatal("a deleted snapshot's handle is still kept by the managed ledger")
	}
	if _, err := ledger.ReadMetadata(e.ctx(), e.r.Store, info.Ledger); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("ledger %d after Delete: err = %v", info.Ledger, err)
	}
	if got, _ := ml.ListSnapshots(e.ctx(), "delayed/s%2F1/"); !slices.Equal(got, []string{"delayed/s%2F1/list"}) {
		t.Fatalf("after Delete ListSnapshots = %q", got)
	}
}
