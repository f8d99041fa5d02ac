package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

type key struct{ ledger, entry int64 }

// Requirement: an add acknowledged before a power loss survives it. The store
// runs on a crash-simulating filesystem; a crash clone taken while adds are in
// flight keeps exactly what was synced. Every add acknowledged before the
// clone must be in it, intact.
func TestPowerLossKeepsAcknowledgedAdds(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fs := &countingFS{FS: mem, syncDelay: time.Millisecond}
	s := openMemStore(t, fs, StoreOptions{})

	const adders = 16
	const perAdder = 60
	var (
		mu    sync.Mutex
		acked = make(map[key]bool)
	)
	cloneAt := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for g := range adders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ledger := int64(g + 1)
			for i := range int64(perAdder) {
				if err := s.Add(entry(ledger, i, i-1, payloadFor(ledger, i))); err != nil {
					t.Errorf("add %d/%d: %v", ledger, i, err)
					return
				}
				mu.Lock()
				acked[key{ledger, i}] = true
				n := len(acked)
				mu.Unlock()
				if n == adders*perAdder/3 {
					once.Do(func() { close(cloneAt) })
				}
			}
		}()
	}
	<-cloneAt
	// Snapshot the acknowledged set, then crash, with adds still in flight.
	mu.Lock()
	snapshot := make(map[key]bool, len(acked))
	for k := range acked {
		snapshot[k] = true
	}
	mu.Unlock()
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	st := s.Stats()
	adds := uint64(adders * perAdder)
	if st.EntriesCommitted != adds {
		t.Fatalf("entries committed = %d, want %d", st.EntriesCommitted, adds)
	}
	if got := fs.syncs.Load(); got < int64(st.GroupCommits) {
		t.Fatalf("%d file syncs for %d acknowledged group commits: a commit was acknowledged without fsync", got, st.GroupCommits)
	}
	if st.GroupCommits >= adds {
		t.Fatalf("%d group commits for %d adds from %d concurrent adders: no grouping", st.GroupCommits, adds, adders)
	}
	t.Logf("%d adds, %d group commits (%.1f entries/fsync), %d file syncs; %d acknowledged at the crash",
		adds, st.GroupCommits, float64(adds)/float64(st.GroupCommits), fs.syncs.Load(), len(snapshot))

	r := openMemStore(t, crashed, StoreOptions{})
	defer r.Close()
	for k := range snapshot {
		lac, p, _, err := r.Read(k.ledger, k.entry)
		if err != nil {
			t.Fatalf("acknowledged entry %v lost in the crash: %v", k, err)
		}
		if lac != k.entry-1 || !bytes.Equal(p, payloadFor(k.ledger, k.entry)) {
			t.Fatalf("entry %v came back different: lac %d payload %q", k, lac, p)
		}
	}
	// The LAC and last entry are recovered from disk too.
	for g := range int64(adders) {
		ledger := g + 1
		var maxAcked int64 = -1
		for k := range snapshot {
			if k.ledger == ledger && k.entry > maxAcked {
				maxAcked = k.entry
			}
		}
		if maxAcked < 0 {
			continue
		}
		lac, last, _, err := r.ReadLac(ledger)
		if err != nil {
			t.Fatal(err)
		}
		if last < maxAcked || lac < maxAcked-1 {
			t.Fatalf("ledger %d: ReadLac after crash = lac %d last %d, acknowledged up to %d", ledger, lac, last, maxAcked)
		}
	}
}

// Requirement: concurrent adds share fsyncs (group commit) and are all
// durable when acknowledged; GroupCommitMaxBytes bounds a batch.
func TestGroupCommitBatchesConcurrentAdds(t *testing.T) {
	fs := &countingFS{FS: vfs.NewMem(), syncDelay: 2 * time.Millisecond}
	var mu sync.Mutex
	var sizes []int
	s := openMemStore(t, fs, StoreOptions{
		GroupCommitMaxBytes: 64 << 10,
		OnCommit: func(ci CommitInfo) {
			mu.Lock()
			sizes = append(sizes, ci.Entries)
			mu.Unlock()
		},
	})
	defer s.Close()
	const n = 400
	var wg sync.WaitGroup
	big := bytes.Repeat([]byte("b"), 8<<10)
	for i := range int64(n) {
		wg.Add(1)
		s.AddAsync(entry(1, i, -1, big), func(err error) {
			if err != nil {
				t.Errorf("add %d: %v", i, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	maxBatch := 0
	total := 0
	for _, n := range sizes {
		maxBatch = max(maxBatch, n)
		total += n
	}
	if total != n {
		t.Fatalf("committed %d entries, want %d", total, n)
	}
	if len(sizes) >= n {
		t.Fatalf("%d commits for %d queued adds: no grouping", len(sizes), n)
	}
	// 8 entries of 8 KiB reach 64 KiB; the op that crosses the limit is the last.
	if maxBatch > 8 {
		t.Fatalf("a batch held %d entries of 8 KiB, over GroupCommitMaxBytes 64 KiB", maxBatch)
	}
}

// Requirement: a fence is durable before it is answered: after a power loss
// right after Fence returns, normal adds are refused and recovery adds are
// accepted.
func TestFenceIsDurable(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s := openMemStore(t, mem, StoreOptions{})
	for i := range int64(3) {
		if err := s.Add(entry(7, i, i-1, payloadFor(7, i))); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Fence(7)
	if err != nil {
		t.Fatal(err)
	}
	if r.LAC != 1 || r.LastEntryID != 2 || r.Limbo {
		t.Fatalf("fence result %+v, want lac 1 last 2", r)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openMemStore(t, crashed, StoreOptions{})
	defer s.Close()
	lac, last, fenced, err := s.ReadLac(7)
	if err != nil || !fenced || lac != 1 || last != 2 {
		t.Fatalf("after crash ReadLac = lac %d last %d fenced %v err %v; want 1 2 true nil", lac, last, fenced, err)
	}
	if err := s.Add(entry(7, 3, 2, payloadFor(7, 3))); !errors.Is(err, ErrFenced) {
		t.Fatalf("normal add on a fenced ledger after restart: %v, want ErrFenced", err)
	}
	if err := s.Add(recoveryEntry(7, 3, 2, payloadFor(7, 3))); err != nil {
		t.Fatalf("recovery add on a fenced ledger: %v", err)
	}
	// Fencing an unknown ledger records it, so a stale writer's later first
	// add is refused too.
	if _, err := s.Fence(8); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(entry(8, 0, -1, []byte("late"))); !errors.Is(err, ErrFenced) {
		t.Fatalf("add after fencing an empty ledger: %v, want ErrFenced", err)
	}
}

// Requirement (BookKeeper #4701): fence and adds are totally ordered. Adds
// queued before the fence are durable and counted in its result; adds queued
// after it are refused.
func TestFenceOrderedWithAdds(t *testing.T) {
	s := openMemStore(t, vfs.NewMem(), StoreOptions{GroupCommitMaxDelay: 20 * time.Millisecond})
	defer s.Close()

	var wg sync.WaitGroup
	results := make([]error, 20)
	add := func(i int64) {
		wg.Add(1)
		s.AddAsync(entry(3, i, i-1, payloadFor(3, i)), func(err error) {
			results[i] = err
			wg.Done()
		})
	}
	for i := range int64(10) {
		add(i)
	}
	fenceDone := make(chan FenceResult, 1)
	s.submit(&op{kind: opFence, ledger: 3, done: func(r FenceResult, err error) {
		if err != nil {
			t.Errorf("fence: %v", err)
		}
		fenceDone <- r
	}})
	for i := int64(10); i < 20; i++ {
		add(i)
	}
	wg.Wait()
	r := <-fenceDone
	for i, err := range results {
		switch {
		case i < 10 && err != nil:
			t.Errorf("add %d queued before the fence failed: %v", i, err)
		case i >= 10 && !errors.Is(err, ErrFenced):
			t.Errorf("add %d queued after the fence: %v, want ErrFenced", i, err)
		}
	}
	if r.LastEntryID != 9 || r.LAC != 8 {
		t.Fatalf("fence result %+v, want last entry 9, lac 8", r)
	}
}

// Requirement (BookKeeper #4701) under real concurrency: every add answered
// OK is covered by the fence's result, and nothing is added after it.
func TestFenceConcurrentWithAddsNeverLosesAnAck(t *testing.T) {
	for round := range 5 {
		s := openMemStore(t, &countingFS{FS: vfs.NewMem(), syncDelay: 100 * time.Microsecond}, StoreOptions{})
		ledger := int64(100 + round)
		var mu sync.Mutex
		var okIDs []int64
		var wg sync.WaitGroup
		for g := range int64(4) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < 400; i += 4 {
					err := s.Add(entry(ledger, i, -1, payloadFor(ledger, i)))
					if errors.Is(err, ErrFenced) {
						return
					}
					if err != nil {
						t.Errorf("add: %v", err)
						return
					}
					mu.Lock()
					okIDs = append(okIDs, i)
					mu.Unlock()
				}
			}()
		}
		r, err := s.Fence(ledger)
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for _, id := range okIDs {
			if id > r.LastEntryID {
				t.Fatalf("round %d: add of entry %d acknowledged but the fence reported last entry %d", round, id, r.LastEntryID)
			}
		}
		_, last, fenced, err := s.ReadLac(ledger)
		if err != nil || !fenced || last != r.LastEntryID {
			t.Fatalf("round %d: after fence ReadLac last %d fenced %v err %v; fence said %d", round, last, fenced, err, r.LastEntryID)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Requirement (BookKeeper #2908): a stored entry that fails its digest is
// reported corrupt, never absent.
func TestCorruptEntryIsCorruptNotMissing(t *testing.T) {
	mem := vfs.NewMem()
	s := openMemStore(t, mem, StoreOptions{})
	for i := range int64(3) {
		if err := s.Add(entry(9, i, i-1, payloadFor(9, i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := flipEntryByte(mem, "/data", 9, 1, 4); err != nil {
		t.Fatal(err)
	}
	if err := flipEntryByte(mem, "/data", 9, 5, 0); err == nil {
		t.Fatal("flipping an absent entry must fail")
	}
	s = openMemStore(t, mem, StoreOptions{})
	defer s.Close()
	_, _, _, err := s.Read(9, 1)
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("read of a flipped entry: %v, want ErrCorrupt", err)
	}
	if _, _, _, err := s.Read(9, 2); err != nil {
		t.Fatalf("neighbour entry: %v", err)
	}
	// A normal add of the same entry does not paper over the corruption; a
	// recovery add (re-replication) repairs it.
	if err := s.Add(entry(9, 1, 0, payloadFor(9, 1))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("normal add over a corrupt entry: %v, want ErrCorrupt", err)
	}
	if err := s.Add(recoveryEntry(9, 1, 0, payloadFor(9, 1))); err != nil {
		t.Fatalf("recovery add over a corrupt entry: %v", err)
	}
	if _, p, _, err := s.Read(9, 1); err != nil || !bytes.Equal(p, payloadFor(9, 1)) {
		t.Fatalf("after repair: %q %v", p, err)
	}
}

// Requirement: a Pebble-level corruption (a damaged sstable block of the
// index) is a corruption error, never "no such entry".
func TestPebbleCorruptionIsCorrupt(t *testing.T) {
	mem := vfs.NewMem()
	s := openMemStore(t, mem, StoreOptions{})
	// Enough entries for several index blocks: the first holds ledger 4's
	// first entries, the metadata keys ("m/...") sort after them.
	for i := range int64(2000) {
		if err := s.Add(entry(4, i, i-1, payloadFor(4, i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ssts := sstables(t, mem, "/data")
	if len(ssts) == 0 {
		t.Fatal("no sstable after flush")
	}
	sst := ssts[len(ssts)-1]
	f, err := mem.OpenReadWrite(sst, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 100); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, 100); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = openMemStore(t, mem, StoreOptions{})
	defer s.Close()
	_, _, _, err = s.Read(4, 0)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read from a damaged sstable block: %v, want ErrCorrupt", err)
	}
	// Garbage collection, which must know every file the index points
	// to, refuses to run on an index it could not read whole.
	if _, err := s.collectIndex([]int64{4}); err == nil {
		t.Fatal("garbage collection ran on a damaged index")
	}
}

func TestIdempotentRetryAndConflict(t *testing.T) {
	s := openMemStore(t, vfs.NewMem(), StoreOptions{})
	defer s.Close()
	e := entry(2, 0, -1, []byte("first"))
	if err := s.Add(e); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	if err := s.Add(e); err != nil {
		t.Fatalf("identical retry: %v", err)
	}
	if s.Stats().EntriesCommitted != before.EntriesCommitted {
		t.Fatal("an identical retry rewrote the entry")
	}
	if err := s.Add(entry(2, 0, -1, []byte("other"))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("same entry, different bytes: %v, want ErrInvalid", err)
	}
	if err := s.Add(recoveryEntry(2, 0, -1, []byte("other"))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("recovery add with different bytes: %v, want ErrInvalid", err)
	}
	if err := s.Add(recoveryEntry(2, 0, -1, []byte("first"))); err != nil {
		t.Fatalf("recovery add with the same bytes: %v", err)
	}
	if _, p, _, err := s.Read(2, 0); err != nil || string(p) != "first" {
		t.Fatalf("stored entry changed: %q %v", p, err)
	}
	// Two different versions in one batch: the first wins, the second fails.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	s.AddAsync(entry(2, 5, -1, []byte("a")), func(err error) { errs[0] = err; wg.Done() })
	s.AddAsync(entry(2, 5, -1, []byte("b")), func(err error) { errs[1] = err; wg.Done() })
	wg.Wait()
	if errs[0] != nil || !errors.Is(errs[1], ErrInvalid) {
		t.Fatalf("conflicting adds: %v, %v", errs[0], errs[1])
	}
}

func TestAddValidation(t *testing.T) {
	s := openMemStore(t, vfs.NewMem(), StoreOptions{})
	defer s.Close()
	bad := entry(1, 0, -1, []byte("x"))
	bad.Digest++
	for name, tc := range map[string]struct {
		e    Entry
		want error
	}{
		"negative ledger": {entry(-1, 0, -1, nil), ErrInvalid},
		"negative entry":  {entry(1, -2, -1, nil), ErrInvalid},
		"lac >= entry":    {entry(1, 3, 3, nil), ErrInvalid},
		"lac < -1":        {entry(1, 3, -2, nil), ErrInvalid},
		"bad digest":      {bad, ErrCorrupt},
	} {
		if err := s.Add(tc.e); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if _, _, _, err := s.Read(1, 0); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("refused adds must not create the ledger: %v", err)
	}
}

func TestReadAnswersAuthoritatively(t *testing.T) {
	s := openMemStore(t, vfs.NewMem(), StoreOptions{})
	defer s.Close()
	if _, _, _, err := s.Read(1, 0); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("unknown ledger: %v", err)
	}
	if _, _, _, err := s.ReadLac(1); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("ReadLac unknown ledger: %v", err)
	}
	if err := s.Add(entry(1, 1, 0, []byte("one"))); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Read(1, 0); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("entry not stored here (striping): %v", err)
	}
	lac, last, fenced, err := s.ReadLac(1)
	if err != nil || lac != 0 || last != 1 || fenced {
		t.Fatalf("ReadLac = %d %d %v %v", lac, last, fenced, err)
	}
}

// Requirement: limbo at the store level: ledgers at or below the cookie's
// bound answer ErrUnknown when absent, refuse normal adds, accept recovery
// adds, and stay in limbo across restarts.
func TestStoreLimbo(t *testing.T) {
	mem := vfs.NewMem()
	s := openMemStore(t, mem, StoreOptions{})
	if err := s.SetCookie(cookieFor("b1", 10)); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Read(5, 0); !errors.Is(err, ErrUnknown) {
		t.Fatalf("read in limbo: %v", err)
	}
	if _, _, _, err := s.ReadLac(5); !errors.Is(err, ErrUnknown) {
		t.Fatalf("ReadLac in limbo: %v", err)
	}
	if err := s.Add(entry(5, 0, -1, []byte("n"))); !errors.Is(err, ErrLimbo) {
		t.Fatalf("normal add in limbo: %v", err)
	}
	if err := s.Add(recoveryEntry(5, 2, 1, []byte("r"))); err != nil {
		t.Fatalf("recovery add in limbo: %v", err)
	}
	r, err := s.Fence(5)
	if err != nil || !r.Limbo || r.LastEntryID != 2 {
		t.Fatalf("fence in limbo: %+v %v", r, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMemStore(t, mem, StoreOptions{})
	defer s.Close()
	if s.LimboBelowOrAt() != 10 {
		t.Fatalf("limbo bound after restart = %d", s.LimboBelowOrAt())
	}
	if _, p, _, err := s.Read(5, 2); err != nil || string(p) != "r" {
		t.Fatalf("recovered entry in limbo ledger: %q %v", p, err)
	}
	if _, _, _, err := s.Read(5, 1); !errors.Is(err, ErrUnknown) {
		t.Fatalf("missing entry of a limbo ledger: %v", err)
	}
	if _, _, fenced, err := s.ReadLac(5); !errors.Is(err, ErrUnknown) || !fenced {
		t.Fatalf("ReadLac of a limbo ledger: fenced %v %v", fenced, err)
	}
	if _, _, _, err := s.Read(11, 0); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("ledger above the limbo bound: %v", err)
	}
	// The record marks the ledger limbo durably, independent of the cookie.
	st, err := s.loadLedger(5)
	if err != nil || !st.limbo || !st.fenced {
		t.Fatalf("ledger record: %+v %v", st, err)
	}
}

// Requirement: a failed commit (ENOSPC on the WAL) is never acknowledged;
// the store turns read-only, keeps serving what it acknowledged, and answers
// UNKNOWN for the entries whose add failed.
func TestCommitFailureTurnsReadOnly(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fs := &countingFS{FS: mem}
	s := openMemStore(t, fs, StoreOptions{})
	for i := range int64(5) {
		if err := s.Add(entry(1, i, i-1, payloadFor(1, i))); err != nil {
			t.Fatal(err)
		}
	}
	fs.failWAL.Store(true)
	err := s.Add(entry(1, 5, 4, payloadFor(1, 5)))
	if err == nil || !errors.Is(err, ErrReadOnly) {
		t.Fatalf("add whose commit failed: %v, want an ErrReadOnly error", err)
	}
	if !s.ReadOnly() || s.Failed() == nil {
		t.Fatal("store must be read-only after a failed commit")
	}
	if err := s.Add(entry(2, 0, -1, []byte("x"))); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("add after the failure: %v", err)
	}
	s.SetReadOnly(false)
	if !s.ReadOnly() {
		t.Fatal("a failed store must stay read-only")
	}
	for i := range int64(5) {
		if _, _, _, err := s.Read(1, i); err != nil {
			t.Fatalf("acknowledged entry %d unreadable: %v", i, err)
		}
	}
	if _, _, _, err := s.Read(1, 5); !errors.Is(err, ErrUnknown) {
		t.Fatalf("entry whose add failed: %v, want ErrUnknown", err)
	}
	if _, last, _, err := s.ReadLac(1); err != nil || last != 4 {
		t.Fatalf("ReadLac must not count the failed add: last %d %v", last, err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = s.Close() // may report the WAL error
	r := openMemStore(t, crashed, StoreOptions{})
	defer r.Close()
	for i := range int64(5) {
		if _, _, _, err := r.Read(1, i); err != nil {
			t.Fatalf("after restart, acknowledged entry %d: %v", i, err)
		}
	}
}

func TestReadOnlyRefusesAddsKeepsReads(t *testing.T) {
	s := openMemStore(t, vfs.NewMem(), StoreOptions{})
	defer s.Close()
	if err := s.Add(entry(1, 0, -1, []byte("a"))); err != nil {
		t.Fatal(err)
	}
	s.SetReadOnly(true)
	if err := s.Add(entry(1, 1, 0, []byte("b"))); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("add while read-only: %v", err)
	}
	if _, p, _, err := s.Read(1, 0); err != nil || string(p) != "a" {
		t.Fatalf("read while read-only: %q %v", p, err)
	}
	if _, err := s.Fence(1); err != nil {
		t.Fatalf("fence while read-only (disk threshold): %v", err)
	}
	s.SetReadOnly(false)
	if err := s.Add(recoveryEntry(1, 1, 0, []byte("b"))); err != nil {
		t.Fatal(err)
	}
}

// Requirement: an unknown format version is refused with a message naming the
// version found and the one supported; so is a directory that is not a store.
func TestFormatVersionChecked(t *testing.T) {
	mem := vfs.NewMem()
	s := openMemStore(t, mem, StoreOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open("/data", &pebble.Options{FS: mem, Logger: pebbleLogger{discardLogger()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(keyFormatVersion, []byte{0, 0, 0, 99}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = OpenStore("/data", StoreOptions{FS: mem, Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), "format version 99") || !strings.Contains(err.Error(), fmt.Sprintf("supports format version %d", FormatVersion)) {
		t.Fatalf("open of format version 99: %v", err)
	}

	// A Pebble store that is not a bookie's.
	other := vfs.NewMem()
	db, err = pebble.Open("/other", &pebble.Options{FS: other, Logger: pebbleLogger{discardLogger()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("foo"), []byte("bar"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore("/other", StoreOptions{FS: other, Logger: testLogger()}); err == nil || !strings.Contains(err.Error(), "not a bookie store") {
		t.Fatalf("open of a foreign pebble store: %v", err)
	}

	// A non-empty directory with no store at all, on the real filesystem.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir, StoreOptions{Logger: testLogger()}); err == nil || !strings.Contains(err.Error(), "does not hold a bookie store") {
		t.Fatalf("open of a foreign directory: %v", err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 1 {
		t.Fatalf("refusing a directory must not write into it: %v", names)
	}
}

func TestClosedStoreRefuses(t *testing.T) {
	s := openMemStore(t, vfs.NewMem(), StoreOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(entry(1, 0, -1, nil)); !errors.Is(err, ErrClosed) {
		t.Fatalf("add after close: %v", err)
	}
	if _, _, _, err := s.Read(1, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// A batch that only moves a ledger's LAC forward with its own entries
// writes no ledger record (rewriting it in every batch made every flushed
// table overlap every other); the LAC still survives a crash, from the last
// entry or, when the highest entry carries a lower LAC than an earlier one
// (a recovery add), from the record, which is then written.
func TestLACOnlyBatchesWriteNoLedgerRecordAndLACSurvivesCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s := openMemStore(t, mem, StoreOptions{})
	for i := range int64(20) {
		if err := s.Add(entry(9, i, i-1, payloadFor(9, i))); err != nil {
			t.Fatal(err)
		}
	}
	recordLAC := func(s *Store) int64 {
		v, closer, err := s.db.Get(ledgerKey(9))
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		return int64(binary.BigEndian.Uint64(v[1:]))
	}
	// Written with entry 0 (LAC -1) and not since.
	if got := recordLAC(s); got != -1 {
		t.Fatalf("ledger record LAC %d after 20 adds, want -1 (no rewrite for LAC-only batches)", got)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMemStore(t, crashed, StoreOptions{})
	if lac, last, _, err := s.ReadLac(9); err != nil || lac != 18 || last != 19 {
		t.Fatalf("after crash ReadLac = lac %d last %d err %v; want 18 19", lac, last, err)
	}
	// A recovery add above the last entry with a lower LAC: the LAC (18)
	// now lives only in memory and on entry 19, so the record takes it.
	if err := s.Add(recoveryEntry(9, 20, 10, payloadFor(9, 20))); err != nil {
		t.Fatal(err)
	}
	if got := recordLAC(s); got != 18 {
		t.Fatalf("ledger record LAC %d after a lower-LAC last entry, want 18", got)
	}
	crashed = crashed.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMemStore(t, crashed, StoreOptions{})
	defer s.Close()
	if lac, last, _, err := s.ReadLac(9); err != nil || lac != 18 || last != 20 {
		t.Fatalf("after second crash ReadLac = lac %d last %d err %v; want 18 20", lac, last, err)
	}
}

// Entries live in the entry log, written once and as sent (uncompressed);
// the LSM holds only their index, so its flushes and compactions move a few
// dozen bytes per entry, not the payload.
func TestEntriesLiveInTheEntryLogNotTheLSM(t *testing.T) {
	mem := vfs.NewMem()
	s := openMemStore(t, mem, StoreOptions{})
	defer s.Close()
	big := bytes.Repeat([]byte("z"), 4096)
	const n = 50
	for i := range int64(n) {
		if err := s.Add(entry(4, i, i-1, big)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	var tables, logs int64
	for _, sst := range sstables(t, mem, "/data") {
		st, err := mem.Stat(sst)
		if err != nil {
			t.Fatal(err)
		}
		tables += st.Size()
	}
	names, err := mem.List("/data/entrylog")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		st, err := mem.Stat("/data/entrylog/" + name)
		if err != nil {
			t.Fatal(err)
		}
		logs += st.Size()
	}
	payload := int64(n * len(big))
	if tables == 0 || tables > payload/10 {
		t.Fatalf("sstables hold %d bytes for %d payload bytes: want the index only (> 0, < 10 %%)", tables, payload)
	}
	if logs < payload {
		t.Fatalf("entry logs hold %d bytes for %d payload bytes: want them stored as sent", logs, payload)
	}
}

// sstables lists the paths of the Pebble tables in dir.
func sstables(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".sst") {
			out = append(out, fs.PathJoin(dir, n))
		}
	}
	return out
}
