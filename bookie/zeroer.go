package bookie

import (
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// zeroer writes zeros ahead of the committer in the current entry log file
// and syncs them, so the committer's frames overwrite blocks that are
// already allocated and inside the file's durable size: its fdatasync then
// flushes data only. Appending grows the file, and every fdatasync has to
// commit the filesystem's journal for the new size and extents too (on
// ext4 here: 4 KiB write+fdatasync p50 200 us appending, 147 us over
// written zeros). Pebble gets the same by recycling its WAL files.
//
// The zeroer only writes at or past the committer's claimed end, under mu,
// and the committer claims a frame's range under mu before writing it, so a
// zero never lands on a frame. A torn or unsynced tail of zeros reads as the
// end of the log at replay.
type zeroer struct {
	f     vfs.File // its own handle on the file
	ahead int64    // how far past the claimed end to keep zeros
	limit int64    // no zeros past this offset
	log   *slog.Logger
	path  string

	mu      sync.Mutex
	claimed int64 // the committer's write end
	next    int64 // the zeroer's next offset
	stop    bool

	kick chan struct{}
	done chan struct{}
}

const zeroChunk = 256 << 10

// zeroRate caps the zeros written, in bytes per second. Zeros help where
// each fdatasync carries little (one entry at a time: 1,000–2,000 frames a
// second of ~1 KiB); at full throughput the frames are large, the journal
// commit is a small part of each sync, and writing every byte twice cost
// CPU: uncapped, batched produce measured 0.82x with CPU per message 1.28x
// (bench ab), against 1.17x for one-at-a-time sends. Past this rate the
// committer overtakes the zeros and appends.
const zeroRate = 8 << 20

// zeroerChunkDelay slows the zeroer down after each chunk (tests: so the
// committer overtakes it).
var zeroerChunkDelay time.Duration

var zeroBuf = make([]byte, zeroChunk)

func startZeroer(f vfs.File, path string, from, ahead, limit int64, log *slog.Logger) *zeroer {
	z := &zeroer{f: f, path: path, ahead: ahead, limit: limit, log: log, claimed: from, next: from,
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	go z.run() // it starts with the first claim: an idle store writes no zeros
	return z
}

func (z *zeroer) poke() {
	select {
	case z.kick <- struct{}{}:
	default:
	}
}

// claim is called by the committer before it writes up to end.
func (z *zeroer) claim(end int64) {
	z.mu.Lock()
	z.claimed = max(z.claimed, end)
	low := z.next-z.claimed < z.ahead/2
	z.mu.Unlock()
	if low {
		z.poke()
	}
}

func (z *zeroer) run() {
	defer close(z.done)
	for range z.kick {
		for {
			z.mu.Lock()
			start := max(z.next, z.claimed)
			if z.stop || start >= z.limit || start-z.claimed >= z.ahead {
				stop := z.stop
				z.mu.Unlock()
				if stop {
					return
				}
				break
			}
			n := min(int64(zeroChunk), z.limit-start)
			began := time.Now()
			_, err := z.f.WriteAt(zeroBuf[:n], start)
			if err == nil {
				z.next = start + n
			}
			z.mu.Unlock()
			if err == nil {
				err = z.f.SyncData()
			}
			time.Sleep(max(zeroerChunkDelay, time.Duration(n)*time.Second/zeroRate-time.Since(began)))
			if err != nil {
				// Not a durability problem: the committer appends as before.
				z.log.Warn("bookie: writing zeros ahead in the entry log failed; appending instead", "file", z.path, "err", err)
				z.mu.Lock()
				z.stop = true
				z.mu.Unlock()
				return
			}
		}
	}
}

// close stops the zeroer and closes its handle.
func (z *zeroer) close() error {
	z.mu.Lock()
	z.stop = true
	z.mu.Unlock()
	z.poke()
	<-z.done
	return z.f.Close()
}
