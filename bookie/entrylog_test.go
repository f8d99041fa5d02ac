package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// logFiles returns the entry log files of the store in /data.
func logFiles(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	ids, err := entryLogFiles(fs, "/data/entrylog")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, id := range ids {
		out = append(out, "/data/entrylog/"+entryLogName(id))
	}
	return out
}

func checkEntries(t *testing.T, s *Store, ledger, n int64) {
	t.Helper()
	for i := range n {
		lac, p, _, err := s.Read(ledger, i)
		if err != nil {
			t.Fatalf("ledger %d entry %d: %v", ledger, i, err)
		}
		if lac != i-1 || !bytes.Equal(p, payloadFor(ledger, i)) {
			t.Fatalf("ledger %d entry %d came back different: lac %d payload %q", ledger, i, lac, p)
		}
	}
}

// Requirement: the index is written without fsync; after a power loss that
// takes every index write since the last checkpoint, the open replays the
// entry log and every acknowledged entry, fence and LAC is back.
func TestReplayRebuildsTheIndexAfterPowerLoss(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s := openMemStore(t, mem, StoreOptions{})
	for i := range int64(100) {
		if err := s.Add(entry(3, i, i-1, payloadFor(3, i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Fence(3); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Checkpoints != 1 {
		t.Fatalf("%d checkpoints, want only the open's (the test needs the index unsynced)", st.Checkpoints)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// What Pebble alone kept: no entry of ledger 3 (its writes were not
	// synced), so without the replay the entries would be lost.
	db, err := pebble.Open("/data", pebbleOptions(crashed, 0, true, discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	k := makeEntryKey(3, 0)
	if _, closer, err := db.Get(k[:]); err == nil {
		closer.Close()
		t.Fatal("the crash kept an unsynced index write; the test proves nothing")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s = openMemStore(t, crashed, StoreOptions{})
	defer s.Close()
	checkEntries(t, s, 3, 100)
	lac, last, fenced, err := s.ReadLac(3)
	if err != nil || lac != 98 || last != 99 || !fenced {
		t.Fatalf("after replay ReadLac = lac %d last %d fenced %v err %v; want 98 99 true", lac, last, fenced, err)
	}
	if err := s.Add(entry(3, 100, 99, payloadFor(3, 100))); !errors.Is(err, ErrFenced) {
		t.Fatalf("normal add after the replayed fence: %v, want ErrFenced", err)
	}
}

// Requirement: a frame torn by a crash (the only one that can be: frames are
// synced one at a time) ends the log; it was never acknowledged. The store
// opens, keeps everything before it, and writes after it safely.
func TestTornTailIsDropped(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s := openMemStore(t, mem, StoreOptions{})
	for i := range int64(10) {
		if err := s.Add(entry(5, i, i-1, payloadFor(5, i))); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = s.Close()

	// Half a frame more at the end of the last file, as a torn write leaves.
	files := logFiles(t, crashed)
	last := files[len(files)-1]
	f, err := crashed.OpenReadWrite(last, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	e := entry(5, 10, 9, payloadFor(5, 10))
	rec := appendEntryRecord(nil, &e)
	frame := make([]byte, frameHeaderLen, frameHeaderLen+len(rec))
	binary.BigEndian.PutUint32(frame[0:4], frameMagic)
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(rec)))
	frame = append(frame, rec...)
	if _, err := f.WriteAt(frame[:len(frame)/2], st.Size()); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = openMemStore(t, crashed, StoreOptions{})
	checkEntries(t, s, 5, 10)
	if _, _, _, err := s.Read(5, 10); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("the torn entry: %v, want ErrNoSuchEntry (it was never acknowledged)", err)
	}
	if err := s.Add(e); err != nil {
		t.Fatal(err)
	}
	crashed2 := crashed.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = s.Close()
	s = openMemStore(t, crashed2, StoreOptions{})
	defer s.Close()
	checkEntries(t, s, 5, 11)
}

// Requirement: a damaged frame with valid frames after it is not a torn
// write (those entries were acknowledged): the open fails with ErrCorrupt
// rather than answer "no such entry" for them.
func TestDamagedFrameInTheMiddleRefusesOpen(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s := openMemStore(t, mem, StoreOptions{})
	for i := range int64(10) {
		if err := s.Add(entry(6, i, i-1, payloadFor(6, i))); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = s.Close()
	files := logFiles(t, crashed)
	f, err := crashed.OpenReadWrite(files[len(files)-1], vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	// One byte of the first frame's first payload.
	b := make([]byte, 1)
	off := int64(frameHeaderLen + recEntryHeaderLen + 2)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = OpenStore("/data", StoreOptions{FS: crashed, Logger: testLogger()})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with a damaged frame before valid ones: %v, want ErrCorrupt", err)
	}
}

// The log rotates to a new file when one is full, checkpoints at each
// rotation, and reads and replays across files.
func TestEntryLogRotatesAndReplaysAcrossFiles(t *testing.T) {
	defer func(v int64) { entryLogFileBytes = v }(entryLogFileBytes)
	entryLogFileBytes = 4 << 10
	mem := vfs.NewCrashableMem()
	s := openMemStore(t, mem, StoreOptions{})
	const n = 200
	for i := range int64(n) {
		if err := s.Add(entry(7, i, i-1, payloadFor(7, i))); err != nil {
			t.Fatal(err)
		}
	}
	files := logFiles(t, mem)
	if len(files) < 3 {
		t.Fatalf("%d log files for %d entries with 4 KiB files: no rotation", len(files), n)
	}
	if st := s.Stats(); st.Checkpoints < uint64(len(files)-1) {
		t.Fatalf("%d checkpoints for %d files: want one per rotation", st.Checkpoints, len(files))
	}
	checkEntries(t, s, 7, n)
	// Entries after the last checkpoint come back from the replay.
	for i := int64(n); i < n+5; i++ {
		if err := s.Add(entry(7, i, i-1, payloadFor(7, i))); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = s.Close()
	s = openMemStore(t, crashed, StoreOptions{})
	defer s.Close()
	checkEntries(t, s, 7, n+5)
}

// With zeros written ahead of the frames, concurrent adds all come back
// intact (a zero never lands on a frame), the file holds zeros past the last
// frame, and the replay after a crash takes them for the end of the log.
func TestZerosAheadNeverClobberFrames(t *testing.T) {
	// A slow zeroer, so the committer overtakes it and it must jump ahead.
	defer func(d time.Duration) { zeroerChunkDelay = d }(zeroerChunkDelay)
	zeroerChunkDelay = 3 * time.Millisecond
	mem := vfs.NewCrashableMem()
	s := openMemStore(t, mem, StoreOptions{ZeroAheadBytes: 512 << 10})
	const ledgers, per = 8, 150
	big := bytes.Repeat([]byte("q"), 3000)
	errs := make(chan error, ledgers)
	for g := int64(1); g <= ledgers; g++ {
		go func() {
			for i := range int64(per) {
				p := append(payloadFor(g, i), big...)
				if err := s.Add(entry(g, i, i-1, p)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range ledgers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	check := func(s *Store) {
		t.Helper()
		for g := int64(1); g <= ledgers; g++ {
			for i := range int64(per) {
				_, p, _, err := s.Read(g, i)
				if err != nil || !bytes.Equal(p, append(payloadFor(g, i), big...)) {
					t.Fatalf("ledger %d entry %d: %v", g, i, err)
				}
			}
		}
	}
	check(s)
	files := logFiles(t, mem)
	st, err := mem.Stat(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	if end := s.elog.pos().off; st.Size() <= end {
		t.Fatalf("log file is %d bytes, frames end at %d: no zeros ahead", st.Size(), end)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = s.Close()
	s = openMemStore(t, crashed, StoreOptions{ZeroAheadBytes: 512 << 10})
	defer s.Close()
	check(s)
}

// A file the log rotated away from ends in the zeros written ahead of its
// frames. A crash after the rotation and before the next checkpoint
// replays it, and its zeros are the end of its log, not damage; non-zero
// bytes there, with a later file after it, are damage.
func TestReplayAcceptsZerosEndingARotatedFile(t *testing.T) {
	defer func(v int64) { entryLogFileBytes = v }(entryLogFileBytes)
	entryLogFileBytes = 16 << 10
	mem := vfs.NewCrashableMem()
	opts := StoreOptions{ZeroAheadBytes: 64 << 10}
	s := openMemStore(t, mem, opts)
	first := logFiles(t, mem)[0]
	add := func(i int64) {
		t.Helper()
		if err := s.Add(entry(2, i, i-1, payloadFor(2, i))); err != nil {
			t.Fatal(err)
		}
	}
	add(0)
	// The zeroer starts with the first frame; wait for its zeros.
	testutilEventually(t, func() bool {
		st, err := mem.Stat(first)
		return err == nil && st.Size() > s.elog.pos().off
	})
	const n = 400
	for i := int64(1); i < n; i++ {
		add(i)
	}
	if files := logFiles(t, mem); len(files) < 2 {
		t.Fatalf("%d log files: no rotation", len(files))
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = s.Close()
	// Put the checkpoint back to the start of the first file, as if the
	// crash came right after its rotation.
	setCheckpoint := func(fs vfs.FS, p logPos) {
		t.Helper()
		db, err := pebble.Open("/data", pebbleOptions(fs, 0, true, discardLogger()))
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set(keyCheckpoint, encodeCheckpoint(p), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := entryLogFiles(crashed, "/data/entrylog")
	if err != nil {
		t.Fatal(err)
	}
	setCheckpoint(crashed, logPos{file: ids[0]})
	damaged := crashed.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})

	s = openMemStore(t, crashed, opts)
	checkEntries(t, s, 2, n)
	_ = s.Close()

	// Non-zero bytes after the first file's last frame.
	f, err := damaged.OpenReadWrite(first, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if _, err := f.WriteAt([]byte("garbage"), st.Size()-7); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := OpenStore("/data", StoreOptions{FS: damaged, Logger: testLogger()}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with garbage ending a rotated file: %v, want ErrCorrupt", err)
	}
}

func testutilEventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
