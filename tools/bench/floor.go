package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// QuorumFloor is the disk's own latency floor for a quorum write of the
// kind the broker's 50 % row makes, with nothing of Meridian on the path:
// entries of size bytes arrive at rate per second; each of writers files
// is appended to by its own group committer (write every entry that has
// arrived, fdatasync, repeat, as a bookie's committer does) and an entry
// is done when qa of the writers have synced it. Its latency is arrival →
// done. On a disk that several writers share, their flushes queue behind
// one another, and a slow flush delays every entry that arrives during
// it: the p99 here is what no storage layer on this disk can beat at this
// load.
func QuorumFloor(dir string, writers, qa int, rate float64, size int, d time.Duration) (Result, error) {
	if writers < 1 || qa < 1 || qa > writers || rate <= 0 || size <= 0 {
		return Result{}, fmt.Errorf("bench: quorum floor: bad parameters: %d writers, qa %d, rate %v, size %d", writers, qa, rate, size)
	}
	total := max(1, int(rate*d.Seconds()))
	interval := time.Duration(float64(time.Second) / rate)
	done := make([][]time.Time, writers)
	files := make([]*os.File, writers)
	for w := range files {
		f, err := os.CreateTemp(dir, "floor-*.dat")
		if err != nil {
			return Result{}, err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		files[w] = f
		done[w] = make([]time.Time, total)
	}
	start := time.Now().Add(50 * time.Millisecond)
	arrival := func(i int) time.Time { return start.Add(time.Duration(i) * interval) }
	errs := make([]error, writers)
	commits := make([]int, writers)
	var wg sync.WaitGroup
	for w, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			var off int64
			for next := 0; next < total; {
				now := time.Now()
				if a := arrival(next); a.After(now) {
					time.Sleep(a.Sub(now))
					now = time.Now()
				}
				end := next + 1
				for end < total && !arrival(end).After(now) {
					end++
				}
				if n := (end - next) * size; cap(buf) < n {
					buf = make([]byte, n)
				} else {
					buf = buf[:n]
				}
				if off > 256<<20 { // keep the file small, as the entry log rotates
					if err := f.Truncate(0); err != nil {
						errs[w] = err
						return
					}
					off = 0
				}
				if _, err := f.WriteAt(buf, off); err != nil {
					errs[w] = err
					return
				}
				off += int64(len(buf))
				if err := syscall.Fdatasync(int(f.Fd())); err != nil {
					errs[w] = err
					return
				}
				t := time.Now()
				for i := next; i < end; i++ {
					done[w][i] = t
				}
				commits[w]++
				next = end
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Result{}, err
		}
	}
	r := Result{Name: fmt.Sprintf("the disk alone: %d files group-committing %.0f entries/s of %s, each done when %d of %d fdatasynced it",
		writers, rate, kib(int64(size)), qa, writers), Ops: total, Entries: int64(total), Bytes: int64(total) * int64(size),
		Lat: make([]time.Duration, 0, total)}
	ts := make([]time.Time, writers)
	last := start
	for i := range total {
		for w := range writers {
			ts[w] = done[w][i]
		}
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		r.Lat = append(r.Lat, ts[qa-1].Sub(arrival(i)))
		if ts[qa-1].After(last) {
			last = ts[qa-1]
		}
	}
	r.Elapsed = last.Sub(start)
	for _, c := range commits {
		r.Fsyncs += uint64(c)
	}
	r.FsyncedOps = uint64(total * writers)
	return r, nil
}

// quorumFloorDir is where QuorumFloor writes, beside the bookies' data.
func quorumFloorDir(root string) (string, error) {
	d := filepath.Join(root, "floor")
	return d, os.MkdirAll(d, 0o755)
}

// kib formats a byte count in KiB, rounded.
func kib(n int64) string { return fmt.Sprintf("%.0f KiB", float64(n)/1024) }
