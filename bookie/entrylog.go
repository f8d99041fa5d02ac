package bookie

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// castagnoli is the CRC32C table of the entry log's frame checksums;
// crc32 uses the SSE4.2/ARMv8 instruction when the CPU has it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// The entry log is the bookie's journal and the home of its entries, as
// BookKeeper's journal and entry logs are in one: every mutation of the
// store (an entry, a ledger record) is appended to it, one frame per group
// commit, and the frame is fdatasynced before any op of the commit is
// answered. Pebble holds only an index, (ledger, entry) -> where the entry
// is in the log, written without fsync: a crash loses at most the index
// writes since the last checkpoint, and OpenStore rebuilds them from the
// log. Entries are written once, where an LSM wrote them to its WAL, then a
// table at every flush and again at every compaction.
//
// Files are entrylog/NNNNNNNN.log, numbered from 1, appended to until they
// reach entryLogFileBytes. A frame is
//
//	magic(4) bodyLen(4) crc32c(4) body
//
// where the CRC covers the file number, the frame's offset, bodyLen and the
// body, so a frame copied elsewhere (or a payload that happens to contain
// one) does not validate. The body is a sequence of records:
//
//	recEntry  ledger(8) entry(8) lac(8) digest(4) len(4) payload
//	recLedger ledger(8) flags(1) maxLAC(8)
//
// A ledger record holds a ledger's full record (as in Pebble's 'l' key), so
// replay in log order ends with each ledger's latest record.
const (
	entryLogDir    = "entrylog"
	entryLogSuffix = ".log"

	frameMagic     = 0x4d454c47 // "MELG"
	frameHeaderLen = 12

	recEntry  = 1
	recLedger = 2

	recEntryHeaderLen  = 1 + 8 + 8 + 8 + 4 + 4
	recLedgerLen       = 1 + 8 + ledgerRecordLen
	entryPayloadOffset = recEntryHeaderLen // payload offset within an entry record
)

// Variables for tests.
var (
	// entryLogFileBytes: a log file is not appended to once this large.
	entryLogFileBytes int64 = 256 << 20
	// checkpointBytes bounds the log written since the last checkpoint, so
	// the replay after a crash reads at most about this much.
	checkpointBytes int64 = 64 << 20
)

// logPos is a position in the entry log.
type logPos struct {
	file uint32
	off  int64
}

func (p logPos) less(q logPos) bool {
	return p.file < q.file || p.file == q.file && p.off < q.off
}

// entryLog appends frames to the current file and reads entries from any
// file. Appends are made by the committer only; reads are concurrent.
type entryLog struct {
	fs  vfs.FS
	dir string // the entrylog directory

	// The current file (committer only).
	cur     vfs.File
	curID   uint32
	curSize int64
	frame   []byte // the frame being built; reused
	// zeroAhead > 0 keeps that many bytes of zeros ahead of the frames
	// (zeroer.go); zero for file systems where growing a file costs nothing.
	zeroAhead int64
	zero      *zeroer
	// dropBehind: after a sync, drop the page cache of the current file's
	// synced pages (dropSynced, dropcache_linux.go); dropped is how far that has been done.
	dropBehind bool
	dropped    int64
	log        *slog.Logger

	mu      sync.RWMutex
	readers map[uint32]vfs.File
	closed  bool
}

func entryLogName(id uint32) string {
	return fmt.Sprintf("%08d%s", id, entryLogSuffix)
}

// entryLogFiles lists the ids of the log files in dir, ascending.
func entryLogFiles(fs vfs.FS, dir string) ([]uint32, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, n := range names {
		base, ok := strings.CutSuffix(n, entryLogSuffix)
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(base, 10, 32)
		if err != nil || id == 0 {
			continue
		}
		ids = append(ids, uint32(id))
	}
	slices.Sort(ids)
	return ids, nil
}

func (l *entryLog) path(id uint32) string { return l.fs.PathJoin(l.dir, entryLogName(id)) }

// create starts file id as the current file and makes its name durable.
func (l *entryLog) create(id uint32) error {
	f, err := l.fs.Create(l.path(id), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("bookie: create entry log %s: %w", l.path(id), err)
	}
	if err := syncDir(l.fs, l.dir); err != nil {
		_ = f.Close()
		return err
	}
	r, err := l.fs.Open(l.path(id))
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("bookie: open entry log %s: %w", l.path(id), err)
	}
	var z *zeroer
	if l.zeroAhead > 0 {
		zf, err := l.fs.OpenReadWrite(l.path(id), vfs.WriteCategoryUnspecified)
		if err != nil {
			_ = f.Close()
			_ = r.Close()
			return fmt.Errorf("bookie: open entry log %s: %w", l.path(id), err)
		}
		z = startZeroer(zf, l.path(id), 0, l.zeroAhead, entryLogFileBytes+l.zeroAhead, l.log)
	}
	if err := l.closeCurrent(); err != nil {
		_ = f.Close()
		_ = r.Close()
		if z != nil {
			_ = z.close()
		}
		return err
	}
	l.cur, l.curID, l.curSize, l.zero, l.dropped = f, id, 0, z, 0
	l.mu.Lock()
	if old, ok := l.readers[id]; ok {
		_ = old.Close()
	}
	l.readers[id] = r
	l.mu.Unlock()
	return nil
}

// closeCurrent stops the current file's zeroer and closes the file.
func (l *entryLog) closeCurrent() error {
	var errs []error
	if l.zero != nil {
		errs = append(errs, l.zero.close())
		l.zero = nil
	}
	if l.cur != nil {
		if err := l.cur.Close(); err != nil {
			errs = append(errs, fmt.Errorf("bookie: close entry log %s: %w", l.path(l.curID), err))
		}
		l.cur = nil
	}
	return errors.Join(errs...)
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("bookie: open dir %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bookie: sync dir %s: %w", dir, err)
	}
	return nil
}

// begin starts a frame, rotating to a new file first when the current one is
// full. Positions returned by the append calls are valid once commitFrame
// succeeds.
func (l *entryLog) begin() error {
	if l.curSize >= entryLogFileBytes {
		if err := l.create(l.curID + 1); err != nil {
			return err
		}
	}
	l.frame = append(l.frame[:0], make([]byte, frameHeaderLen)...)
	return nil
}

// empty reports whether the frame being built holds no record.
func (l *entryLog) empty() bool { return len(l.frame) <= frameHeaderLen }

// appendEntry appends e's record (appendEntryRecord) to the frame. It
// returns where the payload will be.
func (l *entryLog) appendEntry(e *Entry) logPos {
	off := l.curSize + int64(len(l.frame)) + entryPayloadOffset
	l.frame = appendEntryRecord(l.frame, e)
	return logPos{file: l.curID, off: off}
}

func (l *entryLog) appendLedger(id int64, record []byte) {
	l.frame = append(l.frame, recLedger)
	l.frame = binary.BigEndian.AppendUint64(l.frame, uint64(id))
	l.frame = append(l.frame, record...)
}

// commitFrame writes the frame and fdatasyncs the file. It returns the
// frame's size. On error the file's tail is unknown; the store must stop
// writing.
func (l *entryLog) commitFrame() (int, error) {
	f := l.frame
	body := len(f) - frameHeaderLen
	binary.BigEndian.PutUint32(f[0:4], frameMagic)
	binary.BigEndian.PutUint32(f[4:8], uint32(body))
	binary.BigEndian.PutUint32(f[8:12], frameCRC(l.curID, l.curSize, f[4:8], f[frameHeaderLen:]))
	if l.zero != nil {
		l.zero.claim(l.curSize + int64(len(f)))
	}
	if _, err := l.cur.WriteAt(f, l.curSize); err != nil {
		return 0, fmt.Errorf("bookie: write entry log %s: %w", l.path(l.curID), err)
	}
	l.curSize += int64(len(f))
	if err := l.cur.SyncData(); err != nil {
		return 0, fmt.Errorf("bookie: sync entry log %s: %w", l.path(l.curID), err)
	}
	if l.dropBehind {
		l.dropSynced()
	}
	if cap(l.frame) > 2*entryLogFrameKeep {
		l.frame = nil // one huge commit does not pin its buffer
	}
	return len(f), nil
}

// dropChunk: the synced pages are dropped from the page cache once this many
// have gathered behind the current file's end.
const dropChunk = 1 << 20

// dropSynced drops the page cache of the current file's whole pages below
// its synced end, as BookKeeper's journal does (journalRemovePagesFromCache).
// Frames are written once and read back rarely (tailing reads are the
// broker's cache), and writing into newly allocated page cache is the
// costly part of a write here: on this VM a fresh page faults to the host,
// and 600 MB of 64 KiB writes took 1.6 s of CPU appending against 0.4 s
// with the synced pages dropped every 1 MiB (the freed pages are reused hot).
// The page holding the end stays cached: the next frame writes into it, and
// a partial write to an uncached page would read it from disk first. A
// failure only costs the cache, so it turns dropping off.
func (l *entryLog) dropSynced() {
	end := l.curSize &^ (pageSize - 1)
	if end-l.dropped < dropChunk {
		return
	}
	fd := l.cur.Fd()
	if fd == vfs.InvalidFd {
		l.dropBehind = false
		return
	}
	if err := dropPages(fd, l.dropped, end-l.dropped); err != nil {
		l.log.Warn("bookie: dropping synced entry log pages from the page cache failed; keeping them", "file", l.path(l.curID), "err", err)
		l.dropBehind = false
		return
	}
	l.dropped = end
}

const pageSize = 4096

// entryLogFrameKeep is the frame buffer kept between commits.
const entryLogFrameKeep = DefaultGroupCommitMaxBytes + 1<<20

func frameCRC(file uint32, off int64, lenField, body []byte) uint32 {
	var pre [12]byte
	binary.BigEndian.PutUint32(pre[0:4], file)
	binary.BigEndian.PutUint64(pre[4:12], uint64(off))
	c := crc32.Update(0, castagnoli, pre[:])
	c = crc32.Update(c, castagnoli, lenField)
	return crc32.Update(c, castagnoli, body)
}

// pos is the position after the last committed frame.
func (l *entryLog) pos() logPos { return logPos{file: l.curID, off: l.curSize} }

// readAt reads len(p) bytes of file id at off.
func (l *entryLog) readAt(id uint32, off int64, p []byte) error {
	f, err := l.reader(id)
	if err != nil {
		return err
	}
	n, err := f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: entry log %s: %d bytes at %d, file ends short (%d read)", ErrCorrupt, l.path(id), len(p), off, n)
	}
	return fmt.Errorf("bookie: read entry log %s: %w", l.path(id), err)
}

func (l *entryLog) reader(id uint32) (vfs.File, error) {
	l.mu.RLock()
	f, ok := l.readers[id]
	closed := l.closed
	l.mu.RUnlock()
	if ok {
		return f, nil
	}
	if closed {
		return nil, ErrClosed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if f, ok := l.readers[id]; ok {
		return f, nil
	}
	f, err := l.fs.Open(l.path(id))
	if err != nil {
		return nil, fmt.Errorf("%w: entry log %s the index points to: %v", ErrCorrupt, l.path(id), err)
	}
	l.readers[id] = f
	return f, nil
}

func (l *entryLog) close() error {
	l.mu.Lock()
	l.closed = true
	var errs []error
	for id, f := range l.readers {
		errs = append(errs, f.Close())
		delete(l.readers, id)
	}
	l.mu.Unlock()
	errs = append(errs, l.closeCurrent())
	return errors.Join(errs...)
}

// appendEntryRecord appends an entry's log record to dst: a
// recEntryHeaderLen header, then the payload.
func appendEntryRecord(dst []byte, e *Entry) []byte {
	dst = append(dst, recEntry)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.LedgerID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.EntryID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.LAC))
	dst = binary.BigEndian.AppendUint32(dst, e.Digest)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.Payload)))
	return append(dst, e.Payload...)
}

// logRecord is one decoded record of a frame, for replay. Payload aliases
// the frame.
type logRecord struct {
	kind    byte
	ledger  int64
	entry   int64
	lac     int64
	digest  uint32
	payload []byte
	at      logPos // recEntry: where the payload is
	record  []byte // recLedger: the ledger record
}

// decodeFrameBody calls fn for each record of a frame body that starts at
// bodyPos in the log.
func decodeFrameBody(body []byte, bodyPos logPos, fn func(*logRecord) error) error {
	var r logRecord
	for i := 0; i < len(body); {
		switch body[i] {
		case recEntry:
			if len(body)-i < recEntryHeaderLen {
				return fmt.Errorf("%w: entry record header cut at %d", ErrCorrupt, i)
			}
			h := body[i:]
			n := int(binary.BigEndian.Uint32(h[29:33]))
			if len(body)-i-recEntryHeaderLen < n {
				return fmt.Errorf("%w: entry record payload of %d bytes cut at %d", ErrCorrupt, n, i)
			}
			r = logRecord{
				kind:    recEntry,
				ledger:  int64(binary.BigEndian.Uint64(h[1:9])),
				entry:   int64(binary.BigEndian.Uint64(h[9:17])),
				lac:     int64(binary.BigEndian.Uint64(h[17:25])),
				digest:  binary.BigEndian.Uint32(h[25:29]),
				payload: h[recEntryHeaderLen : recEntryHeaderLen+n],
				at:      logPos{file: bodyPos.file, off: bodyPos.off + int64(i+recEntryHeaderLen)},
			}
			i += recEntryHeaderLen + n
		case recLedger:
			if len(body)-i < recLedgerLen {
				return fmt.Errorf("%w: ledger record cut at %d", ErrCorrupt, i)
			}
			h := body[i:]
			r = logRecord{kind: recLedger, ledger: int64(binary.BigEndian.Uint64(h[1:9])), record: h[9:recLedgerLen]}
			i += recLedgerLen
		default:
			return fmt.Errorf("%w: unknown record type %d at %d", ErrCorrupt, body[i], i)
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
	return nil
}

// replayFile reads the frames of file id from off and calls fn with each
// frame's records. It returns the end of the last valid frame. What follows
// it is nothing, zeros (written ahead of the frames: zeroer.go), or a frame
// that does not validate (torn reports that). A torn frame ends the file's
// log only if no valid frame follows it (a write torn by a crash: frames are
// written one at a time and each is synced before the next, so only the
// last can be torn); if a valid frame follows, the log is damaged and
// replay fails with ErrCorrupt, for the entries after it were acknowledged.
func replayFile(fs vfs.FS, path string, id uint32, off int64, fn func(*logRecord) error) (end int64, torn bool, err error) {
	f, err := fs.Open(path)
	if err != nil {
		return 0, false, fmt.Errorf("bookie: open entry log %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, false, fmt.Errorf("bookie: stat entry log %s: %w", path, err)
	}
	size := st.Size()
	if off > size {
		return 0, false, fmt.Errorf("%w: entry log %s is %d bytes, shorter than its checkpoint at %d", ErrCorrupt, path, size, off)
	}
	data := make([]byte, size-off)
	if _, err := f.ReadAt(data, off); err != nil && !errors.Is(err, io.EOF) {
		return 0, false, fmt.Errorf("bookie: read entry log %s: %w", path, err)
	}
	i := 0
	for i < len(data) {
		body, ok := validFrame(data, i, id, off)
		if !ok {
			if allZero(data[i:]) {
				return off + int64(i), false, nil
			}
			for j := i + 1; j+frameHeaderLen <= len(data); j++ {
				if binary.BigEndian.Uint32(data[j:]) == frameMagic {
					if _, ok := validFrame(data, j, id, off); ok {
						return 0, false, fmt.Errorf("%w: entry log %s: damaged frame at %d followed by a valid frame at %d", ErrCorrupt, path, off+int64(i), off+int64(j))
					}
				}
			}
			return off + int64(i), true, nil
		}
		if err := decodeFrameBody(body, logPos{file: id, off: off + int64(i+frameHeaderLen)}, fn); err != nil {
			return 0, false, fmt.Errorf("entry log %s frame at %d: %w", path, off+int64(i), err)
		}
		i += frameHeaderLen + len(body)
	}
	return off + int64(i), false, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// validFrame returns the body of the frame at data[i:] (data starts at file
// offset base) if its header and CRC check.
func validFrame(data []byte, i int, id uint32, base int64) ([]byte, bool) {
	if len(data)-i < frameHeaderLen || binary.BigEndian.Uint32(data[i:]) != frameMagic {
		return nil, false
	}
	n := int(binary.BigEndian.Uint32(data[i+4:]))
	if len(data)-i-frameHeaderLen < n {
		return nil, false
	}
	body := data[i+frameHeaderLen : i+frameHeaderLen+n]
	if frameCRC(id, base+int64(i), data[i+4:i+8], body) != binary.BigEndian.Uint32(data[i+8:]) {
		return nil, false
	}
	return body, true
}

// openEntryLog replays the entry log from the checkpoint into the index,
// then checkpoints and starts a new log file. Appending after a replayed
// file's end would put new frames after a torn one.
func (s *Store) openEntryLog() error {
	fs := s.fs
	dir := fs.PathJoin(s.dir, entryLogDir)
	var cp logPos
	hasCP := false
	switch v, closer, err := s.db.Get(keyCheckpoint); {
	case err == nil:
		cp, err = decodeCheckpoint(v)
		closer.Close()
		if err != nil {
			return fmt.Errorf("bookie: data dir %s: %w", s.dir, err)
		}
		hasCP = true
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("bookie: read checkpoint in %s: %w", s.dir, markCorruption(err))
	}
	if _, err := fs.Stat(dir); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("bookie: entry log dir %s: %w", dir, err)
		}
		if hasCP {
			return fmt.Errorf("%w: data dir %s has an index but its entry log directory %s is gone", ErrCorrupt, s.dir, dir)
		}
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("bookie: create entry log dir %s: %w", dir, err)
		}
		if err := syncDir(fs, s.dir); err != nil {
			return err
		}
	}
	ids, err := entryLogFiles(fs, dir)
	if err != nil {
		return fmt.Errorf("bookie: list entry log dir %s: %w", dir, err)
	}
	s.elog = &entryLog{fs: fs, dir: dir, readers: make(map[uint32]vfs.File), zeroAhead: s.opts.ZeroAheadBytes,
		dropBehind: s.opts.DropSyncedPages > 0 && canDropPages, log: s.log}

	b := s.db.NewBatch()
	defer func() { b.Close() }()
	flush := func() error {
		if b.Empty() {
			return nil
		}
		err := commitBatch(b, pebble.NoSync)
		b.Close()
		b = s.db.NewBatch()
		return markCorruption(err)
	}
	apply := func(r *logRecord) error {
		var err error
		switch r.kind {
		case recEntry:
			k := makeEntryKey(r.ledger, r.entry)
			err = b.Set(k[:], encodeIndexValue(r.lac, r.digest, r.at, len(r.payload)), nil)
		case recLedger:
			err = b.Set(ledgerKey(r.ledger), r.record, nil)
		}
		if err == nil && b.Len() >= 4<<20 {
			err = flush()
		}
		return err
	}
	var replayed int64
	start := time.Now()
	for i, id := range ids {
		if id < cp.file {
			continue
		}
		off := int64(0)
		if id == cp.file {
			off = cp.off
		}
		end, torn, err := replayFile(fs, s.elog.path(id), id, off, apply)
		if err != nil {
			return fmt.Errorf("bookie: replay entry log: %w", err)
		}
		if torn && i != len(ids)-1 {
			// Files before the last were synced whole before the next one
			// was started; only zeros may follow their last frame.
			return fmt.Errorf("%w: entry log %s ends in a damaged frame at %d but is not the last file", ErrCorrupt, s.elog.path(id), end)
		}
		if torn {
			s.log.Warn("bookie: entry log ends in a torn frame (a write cut by a crash; it was never acknowledged)", "file", s.elog.path(id), "valid_bytes", end)
		}
		replayed += end - off
	}
	if err := flush(); err != nil {
		return fmt.Errorf("bookie: replay entry log: %w", err)
	}
	if err := s.loadUsage(); err != nil {
		// A damaged index serves what it can (its damaged entries read as
		// CORRUPT); only garbage collection, which must know every file
		// the index points to, stays off until a restart reads it whole.
		s.usageErr = err
		s.log.Error("bookie: the index could not be read whole at open; garbage collection is off until restart", "dir", s.dir, "err", err)
	}
	next := cp.file
	if len(ids) > 0 {
		next = max(next, ids[len(ids)-1])
	}
	next++
	s.elog.curID = next
	if err := s.checkpoint(); err != nil { // also syncs the replayed index
		return err
	}
	if err := s.elog.create(next); err != nil {
		return err
	}
	if replayed > 0 {
		s.log.Info("bookie: entry log replayed into the index", "dir", s.dir, "bytes", replayed, "took", time.Since(start))
	}
	return nil
}
