// Package bench holds Meridian's benchmarks that need more than `go test
// -bench`: several processes or servers measured side by side in one run,
// alternating so machine drift hits every side alike, printed as a table of
// ratios (these 2-core machines are shared and noisy; ratios from one run
// are what to read).
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meridian-mq/meridian/bookie"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/ports"
	"github.com/meridian-mq/meridian/rack"
)

// StorageOptions configures RunStorage.
type StorageOptions struct {
	// Out: also write the markdown table to this file ("" = stdout only).
	Out string
	// Dir: a directory on the disk to measure. Default: a temp dir under ".".
	Dir string
	// Duration of each measurement. Default 5s.
	Duration time.Duration
	// Rounds of alternation. Default 2.
	Rounds int
}

// Result of one measurement.
type Result struct {
	Name       string
	Ops        int
	Bytes      int64
	Elapsed    time.Duration
	Lat        []time.Duration
	Fsyncs     uint64 // group commits summed over bookies (bookie runs)
	FsyncedOps uint64 // entries committed summed over bookies
	// Entries: storage entries written (a batched broker entry holds many
	// messages; bookie runs: one per op).
	Entries int64
	// ServerCPU: CPU time (user+system) of the serving side during the
	// run; ClientCPU: of the load generator (0 = not measured).
	ServerCPU, ClientCPU time.Duration
	Errors               int   // operations that failed (not in Ops)
	FirstErr             error // the first of them
	// DiskFlushes: flush requests the disks completed during the run
	// (machine-wide, /proc/diskstats); BookieReads: reads the bookies
	// answered; BookieBytes: bytes the bookies committed.
	DiskFlushes              uint64
	BookieReads, BookieBytes float64
}

func (r Result) rate() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }
func (r Result) mbps() float64 { return float64(r.Bytes) / r.Elapsed.Seconds() / 1e6 }

func (r Result) pct(p float64) time.Duration {
	if len(r.Lat) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), r.Lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func merge(rs []Result) Result {
	out := Result{Name: rs[0].Name}
	for _, r := range rs {
		out.Ops += r.Ops
		out.Bytes += r.Bytes
		out.Elapsed += r.Elapsed
		out.Lat = append(out.Lat, r.Lat...)
		out.Fsyncs += r.Fsyncs
		out.FsyncedOps += r.FsyncedOps
		out.Entries += r.Entries
		out.ServerCPU += r.ServerCPU
		out.ClientCPU += r.ClientCPU
		out.Errors += r.Errors
		out.DiskFlushes += r.DiskFlushes
		out.BookieReads += r.BookieReads
		out.BookieBytes += r.BookieBytes
		if out.FirstErr == nil {
			out.FirstErr = r.FirstErr
		}
	}
	return out
}

func sizeName(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

// DiskFsync writes 4 KiB blocks to one file, each followed by fdatasync,
// for d: the raw rate of durable small writes on this disk.
func DiskFsync(dir string, d time.Duration) (Result, error) {
	f, err := os.CreateTemp(dir, "fsync-*.dat")
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	r := Result{Name: "disk 4 KiB write+fdatasync"}
	start := time.Now()
	for time.Since(start) < d {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return r, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return r, err
		}
		r.Lat = append(r.Lat, time.Since(t))
		r.Ops++
		r.Bytes += int64(len(buf))
		if r.Ops%4096 == 0 { // keep the file small
			if _, err := f.Seek(0, 0); err != nil {
				return r, err
			}
		}
	}
	r.Elapsed = time.Since(start)
	return r, nil
}

// DiskSeq writes n MiB to a new file in 1 MiB writes, then one
// fdatasync: the disk's sequential durable write rate (its bandwidth
// limit; the fsync rate is DiskFsync's).
func DiskSeq(dir string, mib int) (Result, error) {
	f, err := os.CreateTemp(dir, "seq-*.dat")
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	r := Result{Name: fmt.Sprintf("disk sequential %d MiB write + fdatasync", mib)}
	start := time.Now()
	for range mib {
		if _, err := f.Write(buf); err != nil {
			return r, err
		}
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		return r, err
	}
	r.Elapsed = time.Since(start)
	r.Ops = 1
	r.Bytes = int64(mib) << 20
	return r, nil
}

// storageRig is an embedded etcd and three bookies on loopback.
type storageRig struct {
	etcd    *cluster.Etcd
	store   *cluster.Store
	view    *cluster.BookieView
	servers []*bookie.Server
	client  *ledger.Client
}

// freeAddr plans a loopback port through internal/ports (reserved
// machine-wide, so tests running beside the bench never get it).
func freeAddr() (string, error) { return ports.Free("127.0.0.1") }

func startRig(ctx context.Context, dir string) (*storageRig, error) {
	ca, _ := freeAddr()
	pa, _ := freeAddr()
	e, err := cluster.StartEtcd(cluster.EtcdConfig{Name: "bench", DataDir: filepath.Join(dir, "etcd"), ClientURL: "http://" + ca, PeerURL: "http://" + pa})
	if err != nil {
		return nil, err
	}
	rig := &storageRig{etcd: e}
	rig.store, err = cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{e.ClientURL()}, Prefix: "/bench"})
	if err != nil {
		rig.close()
		return nil, err
	}
	// The rig's warnings (a bookie failed for a ledger, an ensemble change,
	// a registration lease lost) go to stderr: twice a `make bench` run
	// ended with "0 usable" bookies and nothing said why.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("rig", "storage")
	// Three bookies for the E=3 ledgers, each on its own rack, and a
	// fourth, idle, on a fourth rack: a bookie that stalls past the add
	// timeout (the disk, or other work on a shared machine) is replaced
	// by an ensemble change, as in any real region, instead of failing
	// the ledger and the whole `make bench` run with "no usable bookie
	// outside the ensemble" (seen in round 4 of a run under load, after
	// ten minutes of measurements). The idle one adds no fsyncs.
	const rigBookies = 4
	for i := 1; i <= rigBookies; i++ {
		c := bookie.DefaultConfig()
		c.ID = fmt.Sprintf("b%d", i)
		c.Region, c.Rack = "bench", fmt.Sprintf("r%d", i)
		c.ListenAddr = "127.0.0.1:0"
		c.DataDir = filepath.Join(dir, c.ID)
		c.Logger = quiet
		reg := cluster.NewBookieRegistry(rig.store, 0)
		reg.Logger = quiet
		s, err := bookie.New(c, reg)
		if err != nil {
			rig.close()
			return nil, err
		}
		if err := s.Start(); err != nil {
			rig.close()
			return nil, err
		}
		rig.servers = append(rig.servers, s)
	}
	rig.view, err = cluster.WatchBookies(ctx, rig.store)
	if err != nil {
		rig.close()
		return nil, err
	}
	for len(rig.view.Bookies(true)) < rigBookies {
		time.Sleep(10 * time.Millisecond)
	}
	rig.client, err = ledger.New(ledger.Config{Store: rig.store, Bookies: ledger.ViewSource{View: rig.view}, Region: "bench", Logger: quiet})
	if err != nil {
		rig.close()
		return nil, err
	}
	return rig, nil
}

func (r *storageRig) close() {
	if r.client != nil {
		r.client.Close()
	}
	if r.view != nil {
		r.view.Close()
	}
	for _, s := range r.servers {
		s.Close()
	}
	if r.store != nil {
		r.store.Close()
	}
	if r.etcd != nil {
		r.etcd.Close()
	}
}

func (r *storageRig) commitStats() (commits, entries uint64) {
	for _, s := range r.servers {
		st := s.Store().Stats()
		commits += st.GroupCommits
		entries += st.EntriesCommitted
	}
	return
}

// LedgerAdds appends size-byte entries to a new E=3 Qw=3 Qa=2 ledger with
// `inflight` adds outstanding, for d.
func (r *storageRig) LedgerAdds(ctx context.Context, size, inflight int, d time.Duration) (Result, error) {
	w, err := r.client.Create(ctx, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Placement: rack.DefaultPolicy()})
	if err != nil {
		return Result{}, err
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	res := Result{Name: fmt.Sprintf("bookie adds %s, E=Qw=3 Qa=2, %d in flight", sizeName(size), inflight)}
	sem := make(chan struct{}, inflight)
	var mu sync.Mutex
	var firstErr error
	c0, e0 := r.commitStats()
	start := time.Now()
	for time.Since(start) < d {
		sem <- struct{}{}
		t := time.Now()
		w.AppendAsync(payload, func(_ int64, err error) {
			lat := time.Since(t)
			mu.Lock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			res.Lat = append(res.Lat, lat)
			res.Ops++
			res.Bytes += int64(size)
			mu.Unlock()
			<-sem
		})
	}
	for range inflight {
		sem <- struct{}{}
	}
	res.Elapsed = time.Since(start)
	c1, e1 := r.commitStats()
	res.Fsyncs, res.FsyncedOps = c1-c0, e1-e0
	res.Entries = int64(res.Ops)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = w.Close(cctx)
	return res, firstErr
}

// StorageSummary is what RunStorage measured.
type StorageSummary struct {
	Section         string
	Disk, One, Many Result
}

// RunStorage measures the disk and the bookie add path, alternating, and
// prints the table.
func RunStorage(ctx context.Context, o StorageOptions, out io.Writer) (sum StorageSummary, err error) {
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 2
	}
	dir, cleanup, err := workDir(o.Dir, "storage")
	if err != nil {
		return sum, err
	}
	defer cleanup()
	rig, err := startRig(ctx, dir)
	if err != nil {
		return sum, err
	}
	defer rig.close()
	var disk, one, many []Result
	for round := range o.Rounds {
		fmt.Fprintf(out, "round %d/%d ...\n", round+1, o.Rounds)
		r, err := DiskFsync(dir, o.Duration)
		if err != nil {
			return sum, err
		}
		disk = append(disk, r)
		if r, err = rig.LedgerAdds(ctx, 1024, 1, o.Duration); err != nil {
			return sum, err
		}
		one = append(one, r)
		if r, err = rig.LedgerAdds(ctx, 1024, 64, o.Duration); err != nil {
			return sum, err
		}
		many = append(many, r)
	}
	d, a1, a64 := merge(disk), merge(one), merge(many)
	var sb strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&sb, "## Storage: disk vs bookie add path\n\n")
	fmt.Fprintf(&sb, "Run %s on %s (%d cores, %s/%s); `make bench` (`meridian bench storage`), %d alternating rounds of %s each, data on the same disk.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, o.Rounds, o.Duration)
	fmt.Fprintf(&sb, "| measurement | ops/s | MB/s | p50 | p99 | fsyncs/s (all bookies) | entries per fsync | ratio to disk ops/s |\n")
	fmt.Fprintf(&sb, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	row := func(r Result, bookieRun bool) {
		fs, per := "", ""
		if bookieRun {
			fs = fmt.Sprintf("%.0f", float64(r.Fsyncs)/r.Elapsed.Seconds())
			if r.Fsyncs > 0 {
				per = fmt.Sprintf("%.1f", float64(r.FsyncedOps)/float64(r.Fsyncs))
			}
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %.1f | %s | %s | %s | %s | %.2f |\n", r.Name, r.rate(), r.mbps(),
			r.pct(0.50).Round(time.Microsecond), r.pct(0.99).Round(time.Microsecond), fs, per, r.rate()/d.rate())
	}
	row(d, false)
	row(a1, true)
	row(a64, true)
	fmt.Fprintf(&sb, "\nEach bookie add is acknowledged only after fsync on 2 of 3 bookies (all 3 write); the three bookies share this one disk, so every entry costs 3 writes on it. Group commit lets one fsync carry many entries: with 64 adds in flight the add rate is %.1f× the disk's raw fsync rate.\n", a64.rate()/d.rate())
	fmt.Fprint(out, sb.String())
	sum.Section, sum.Disk, sum.One, sum.Many = sb.String(), d, a1, a64
	if o.Out != "" {
		return sum, writeReport(o.Out, sb.String())
	}
	return sum, nil
}

// writeReport writes a section into the markdown report: a new file gets
// the header; an existing one generated in the last hour by the same `make
// bench` run gets the section appended (make bench runs the storage and
// the broker measurements one after the other).
func writeReport(path, section string) error {
	if st, err := os.Stat(path); err == nil && time.Since(st.ModTime()) < time.Hour && os.Getenv("MERIDIAN_BENCH_APPEND") != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString("\n" + section)
		return err
	}
	return os.WriteFile(path, []byte("# Benchmarks\n\nGenerated by `make bench`; do not edit by hand.\n\n"+section), 0o644)
}
