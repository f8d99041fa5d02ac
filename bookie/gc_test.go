package bookie_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-mq/meridian/bookie"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/rack"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// The garbage collection tests run a real bookie (Pebble on disk, gRPC
// over loopback) registered in a real etcd, write ledgers through the
// real ledger client (metadata in etcd), and delete them the way the
// broker does (ledger.DeleteLedger).

const gcPrefix = "/meridian/regions/gc"

// gcLogFileBytes: small log files, so a few ledgers span several.
const gcLogFileBytes = 32 << 10

func gcLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// gcPayload is entry e of ledger l: 2 KiB, different for every entry.
func gcPayload(l, e int64) []byte {
	head := fmt.Sprintf("ledger %d entry %d ", l, e)
	return append([]byte(head), bytes.Repeat([]byte{byte(l*31 + e)}, 2048-len(head))...)
}

type gcRig struct {
	t     *testing.T
	url   string
	store *cluster.Store
	dir   string
	cfg   bookie.Config
	srv   *bookie.Server
	lc    *ledger.Client
	view  *cluster.BookieView
}

func newGCRig(t *testing.T, mutate ...func(*bookie.Config)) *gcRig {
	t.Helper()
	t.Cleanup(bookie.SetEntryLogFileBytes(gcLogFileBytes))
	url := testutil.StartEtcd(t)
	r := &gcRig{t: t, url: url, store: testutil.Store(t, url, gcPrefix), dir: t.TempDir()}
	cfg := bookie.DefaultConfig()
	cfg.ID = "gc-bookie-1"
	cfg.Rack = "r1"
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.DataDir = r.dir
	cfg.MemTableSizeBytes = 4 << 20
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.GCInterval = -1          // passes run when the test says
	cfg.CompactionThreshold = -1 // whole files only, unless a test says
	cfg.Logger = gcLogger()
	for _, m := range mutate {
		m(&cfg)
	}
	r.cfg = cfg
	r.start()
	view, err := cluster.WatchBookies(context.Background(), r.store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	r.view = view
	lc, err := ledger.New(ledger.Config{Store: r.store, Bookies: ledger.ViewSource{View: view}, Region: "gc", Rack: "r1", AddTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	r.lc = lc
	testutil.Eventually(t, 30*time.Second, "the bookie registered", func() bool { return len(view.Bookies(true)) == 1 })
	return r
}

func (r *gcRig) start() {
	r.t.Helper()
	reg := cluster.NewBookieRegistry(r.store, 0)
	srv, err := bookie.New(r.cfg, reg)
	if err != nil {
		r.t.Fatalf("bookie.New: %v", err)
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		r.t.Fatalf("Start: %v", err)
	}
	r.srv = srv
	r.t.Cleanup(func() { r.srv.Close() })
}

func (r *gcRig) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	r.t.Cleanup(cancel)
	return ctx
}

func (r *gcRig) create() *ledger.Writer {
	r.t.Helper()
	w, err := r.lc.Create(r.ctx(), ledger.CreateOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, Placement: rack.DefaultPolicy()})
	if err != nil {
		r.t.Fatalf("create ledger: %v", err)
	}
	return w
}

func (r *gcRig) append(w *ledger.Writer, n int) {
	r.t.Helper()
	for range n {
		e := w.LAC() + 1 // appends are sequential: the next entry id
		got, err := w.Append(r.ctx(), gcPayload(w.ID(), e))
		if err != nil {
			r.t.Fatalf("append to ledger %d: %v", w.ID(), err)
		}
		if got != e {
			r.t.Fatalf("append to ledger %d: entry %d, want %d", w.ID(), got, e)
		}
	}
}

// write creates a ledger, writes n entries and closes it.
func (r *gcRig) write(n int) int64 {
	r.t.Helper()
	w := r.create()
	r.append(w, n)
	if err := w.Close(r.ctx()); err != nil {
		r.t.Fatal(err)
	}
	return w.ID()
}

func (r *gcRig) delete(ids ...int64) {
	r.t.Helper()
	for _, id := range ids {
		if err := ledger.DeleteLedger(r.ctx(), r.store, id); err != nil {
			r.t.Fatalf("delete ledger %d: %v", id, err)
		}
	}
}

// checkStored reads every entry of ledger id (n entries) from the store
// and compares it byte for byte.
func checkStored(t *testing.T, st *bookie.Store, id int64, n int) {
	t.Helper()
	for e := range int64(n) {
		_, p, _, err := st.Read(id, e)
		if err != nil {
			t.Fatalf("ledger %d entry %d: %v", id, e, err)
		}
		if !bytes.Equal(p, gcPayload(id, e)) {
			t.Fatalf("ledger %d entry %d: payload differs (%d bytes)", id, e, len(p))
		}
	}
}

// checkCollected: every read of the ledger answers NO_SUCH_LEDGER (never
// CORRUPT: no index entry points to a removed file).
func checkCollected(t *testing.T, st *bookie.Store, id int64, n int) {
	t.Helper()
	for e := range int64(n) {
		if _, _, _, err := st.Read(id, e); !errors.Is(err, bookie.ErrNoSuchLedger) {
			t.Fatalf("ledger %d entry %d after collection: %v, want NO_SUCH_LEDGER", id, e, err)
		}
	}
}

// readAll reads a ledger through the ledger client and compares it.
func (r *gcRig) readAll(id int64, n int) {
	r.t.Helper()
	rd, err := r.lc.Open(r.ctx(), id)
	if err != nil {
		r.t.Fatalf("open ledger %d: %v", id, err)
	}
	for e := range int64(n) {
		got, err := rd.Read(r.ctx(), e)
		if err != nil {
			r.t.Fatalf("read ledger %d entry %d: %v", id, e, err)
		}
		if !bytes.Equal(got.Payload, gcPayload(id, e)) {
			r.t.Fatalf("ledger %d entry %d: payload differs", id, e)
		}
	}
}

// logFiles returns the entry log files on disk and their sizes.
func logFiles(t *testing.T, st *bookie.Store) map[string]int64 {
	t.Helper()
	ents, err := os.ReadDir(bookie.EntryLogDir(st))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".log" {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fi.Size()
	}
	return out
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// onlyDeleted returns the log files (not the current one) whose every
// ledger is in deleted: those a pass must remove.
func onlyDeleted(t *testing.T, st *bookie.Store, deleted ...int64) (gone, kept []string) {
	t.Helper()
	fl, err := bookie.FileLedgers(st)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := bookie.CurrentLogFile(st)
	if err != nil {
		t.Fatal(err)
	}
	for f, ls := range fl {
		name := filepath.Base(bookie.EntryLogPath(st, f))
		live := f == cur
		for l := range ls {
			if !slices.Contains(deleted, l) {
				live = true
			}
		}
		if live {
			kept = append(kept, name)
		} else {
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	slices.Sort(kept)
	return gone, kept
}

func metricValue(t *testing.T, srv *bookie.Server, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := srv.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// A pass deletes the ledgers deleted in metadata and removes the log files
// only they used; files shared with a live ledger stay, live ledgers read
// back byte for byte, a collected ledger answers NO_SUCH_LEDGER and refuses
// adds, and the bookie restarts cleanly afterwards.
func TestGCReclaimsDeletedLedgers(t *testing.T) {
	r := newGCRig(t)
	const n = 40 // 80 KiB: about three 32 KiB files a ledger
	del1, del2 := r.write(n), r.write(n)
	live1 := r.write(n)
	// Two ledgers written alternately share their files.
	wLive, wDel := r.create(), r.create()
	for range n {
		r.append(wLive, 1)
		r.append(wDel, 1)
	}
	for _, w := range []*ledger.Writer{wLive, wDel} {
		if err := w.Close(r.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	live2, del3 := wLive.ID(), wDel.ID()
	deleted := []int64{del1, del2, del3}
	r.delete(deleted...)

	st := r.srv.Store()
	gone, kept := onlyDeleted(t, st, deleted...)
	if len(gone) < 4 {
		t.Fatalf("want at least 4 files holding only deleted ledgers, got %v (kept %v)", gone, kept)
	}
	before := logFiles(t, st)
	res, err := r.srv.CollectGarbage(r.ctx())
	if err != nil {
		t.Fatalf("gc pass: %v", err)
	}
	after := logFiles(t, st)
	t.Logf("pass: %+v; files %d -> %d, bytes on disk %d -> %d", res, len(before), len(after), sum(before), sum(after))
	if res.LedgersDeleted != len(deleted) {
		t.Errorf("ledgers deleted: %d, want %d", res.LedgersDeleted, len(deleted))
	}
	for _, f := range gone {
		if _, ok := after[f]; ok {
			t.Errorf("file %s holds only deleted ledgers and is still on disk", f)
		}
	}
	for _, f := range kept {
		if _, ok := after[f]; !ok {
			t.Errorf("file %s holds a live ledger and was removed", f)
		}
	}
	if res.FilesRemoved != len(before)-len(after) || res.FilesRemoved < len(gone) {
		t.Errorf("files removed: %d, on disk %d -> %d, %d held only deleted ledgers", res.FilesRemoved, len(before), len(after), len(gone))
	}
	// The current file grows meanwhile (zeros written ahead of its
	// frames): count the files that went.
	var freed int64
	for f, size := range before {
		if _, ok := after[f]; !ok {
			freed += size
		}
	}
	if freed != res.BytesReclaimed || freed < int64(len(gone))*gcLogFileBytes {
		t.Errorf("the removed files held %d bytes, the pass says %d; want at least %d", freed, res.BytesReclaimed, int64(len(gone))*gcLogFileBytes)
	}

	r.readAll(live1, n)
	r.readAll(live2, n)
	for _, id := range deleted {
		checkCollected(t, st, id, n)
	}
	// A writer that missed the deletion gets no acknowledgement: the
	// collected ledger's record is a fenced tombstone.
	if err := st.Add(bookie.EntryForTest(del1, n, n-1, []byte("late"))); !errors.Is(err, bookie.ErrFenced) {
		t.Errorf("add to a collected ledger: %v, want FENCED", err)
	}

	if got := metricValue(t, r.srv, "meridian_bookie_gc_deleted_ledgers_total"); got != float64(len(deleted)) {
		t.Errorf("meridian_bookie_gc_deleted_ledgers_total = %v", got)
	}
	if got := metricValue(t, r.srv, "meridian_bookie_gc_removed_files_total"); got != float64(res.FilesRemoved) {
		t.Errorf("meridian_bookie_gc_removed_files_total = %v, want %d", got, res.FilesRemoved)
	}
	if got := metricValue(t, r.srv, "meridian_bookie_gc_reclaimed_bytes_total"); got != float64(res.BytesReclaimed) {
		t.Errorf("meridian_bookie_gc_reclaimed_bytes_total = %v, want %d", got, res.BytesReclaimed)
	}
	if got := metricValue(t, r.srv, "meridian_bookie_gc_passes_total", "result", "ok"); got != 1 {
		t.Errorf("meridian_bookie_gc_passes_total{result=ok} = %v", got)
	}
	if got := metricValue(t, r.srv, "meridian_bookie_gc_last_pass_seconds"); got <= 0 {
		t.Errorf("meridian_bookie_gc_last_pass_seconds = %v", got)
	}

	// A restart after collection opens cleanly: live ledgers whole,
	// collected ones still collected, and a second pass finds nothing
	// more to delete.
	if err := r.srv.Close(); err != nil {
		t.Fatal(err)
	}
	r.start()
	st = r.srv.Store()
	checkStored(t, st, live1, n)
	checkStored(t, st, live2, n)
	for _, id := range deleted {
		checkCollected(t, st, id, n)
	}
	res, err = r.srv.CollectGarbage(r.ctx())
	if err != nil || res.LedgersDeleted != 0 {
		t.Fatalf("second pass: %+v, %v", res, err)
	}
	checkStored(t, st, live1, n)
	checkStored(t, st, live2, n)
}

// A ledger created while a pass runs (after it listed metadata, before it
// deletes) is kept, whole: only ledgers the bookie held before the listing
// are candidates.
func TestGCKeepsLedgerCreatedDuringPass(t *testing.T) {
	r := newGCRig(t)
	const n = 30
	old := r.write(n)
	r.delete(old)
	var fresh int64
	t.Cleanup(bookie.SetGCHooks(func() {
		if fresh == 0 {
			fresh = r.write(n)
		}
	}, nil))
	res, err := r.srv.CollectGarbage(r.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if fresh == 0 {
		t.Fatal("the hook did not run")
	}
	if res.LedgersDeleted != 1 {
		t.Errorf("ledgers deleted: %d, want 1 (the deleted one only)", res.LedgersDeleted)
	}
	st := r.srv.Store()
	checkCollected(t, st, old, n)
	checkStored(t, st, fresh, n)
	r.readAll(fresh, n)
	// The next pass sees it in metadata and keeps it.
	if res, err := r.srv.CollectGarbage(r.ctx()); err != nil || res.LedgersDeleted != 0 {
		t.Fatalf("next pass: %+v, %v", res, err)
	}
	checkStored(t, st, fresh, n)
}

// failSecond lists like the registry, except that the second listing of
// a pass fails.
type failSecond struct {
	*cluster.BookieRegistry
	calls int
}

func (f *failSecond) ListLedgers(ctx context.Context) ([]int64, error) {
	f.calls++
	if f.calls%2 == 0 {
		return nil, errors.New("etcd: request timed out")
	}
	return f.BookieRegistry.ListLedgers(ctx)
}

// A pass whose metadata listing fails, whose metadata does not know the
// bookie (wiped or another etcd), or whose listing meets a key that is not
// a ledger's deletes nothing; the same pass against the real metadata then
// deletes the deleted ledger (so the pass had something to delete).
func TestGCFailedListingDeletesNothing(t *testing.T) {
	r := newGCRig(t)
	const n = 30
	gone, live := r.write(n), r.write(n)
	r.delete(gone)
	st, cookie := r.srv.Store(), r.srv.Cookie()
	before := logFiles(t, st)
	reg := cluster.NewBookieRegistry(r.store, 0)

	check := func(what string, res bookie.GCResult, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: the pass succeeded (%+v)", what, res)
		}
		if res.LedgersDeleted != 0 || res.FilesRemoved != 0 {
			t.Errorf("%s: the pass deleted %d ledgers and %d files", what, res.LedgersDeleted, res.FilesRemoved)
		}
		checkStored(t, st, gone, n)
		checkStored(t, st, live, n)
		if after := logFiles(t, st); len(after) != len(before) {
			t.Errorf("%s: log files %d -> %d", what, len(before), len(after))
		}
	}
	res, err := bookie.CollectGarbageWith(r.ctx(), st, reg, &failSecond{BookieRegistry: reg}, cookie)
	check("second listing failed", res, err)

	wiped := cluster.NewBookieRegistry(testutil.Store(t, r.url, "/meridian/regions/wiped"), 0)
	res, err = bookie.CollectGarbageWith(r.ctx(), st, wiped, wiped, cookie)
	check("empty metadata without the bookie's cookie", res, err)

	if _, err := r.store.Put(r.ctx(), "/ledgers/not-a-ledger", []byte("x")); err != nil {
		t.Fatal(err)
	}
	res, err = bookie.CollectGarbageWith(r.ctx(), st, reg, reg, cookie)
	check("a key under /ledgers/ that is not a ledger's", res, err)
	if err := r.store.Delete(r.ctx(), "/ledgers/not-a-ledger"); err != nil {
		t.Fatal(err)
	}

	res, err = bookie.CollectGarbageWith(r.ctx(), st, reg, reg, cookie)
	if err != nil || res.LedgersDeleted != 1 {
		t.Fatalf("pass against the real metadata: %+v, %v", res, err)
	}
	checkCollected(t, st, gone, n)
	checkStored(t, st, live, n)
}

// A bookie killed (-9, on a file system that loses what was not synced)
// after a pass synced its index deletions and before it unlinked the
// files opens cleanly: the collected ledger stays collected (no read is
// sent to a file), live ledgers read back whole, and the next pass
// removes the files left behind.
func TestGCCrashBetweenIndexDeleteAndUnlink(t *testing.T) {
	if dir := os.Getenv("MERIDIAN_GC_CRASH_DIR"); dir != "" {
		gcCrashChild(t, dir, os.Getenv("MERIDIAN_GC_CRASH_ETCD"), false)
		return
	}
	r := newGCRig(t, func(c *bookie.Config) { *c = c.SimulatePowerLoss() })
	const n = 40
	gone, live := r.write(n), r.write(n)
	r.delete(gone)
	goneFiles, _ := onlyDeleted(t, r.srv.Store(), gone)
	if len(goneFiles) < 2 {
		t.Fatalf("want at least 2 files of the deleted ledger only, got %v", goneFiles)
	}
	if err := r.srv.Close(); err != nil {
		t.Fatal(err)
	}

	runCrashChild(t, "TestGCCrashBetweenIndexDeleteAndUnlink", r)
	onDisk := map[string]bool{}
	ents, err := os.ReadDir(filepath.Join(r.dir, "entrylog"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		onDisk[e.Name()] = true
	}
	for _, f := range goneFiles {
		if !onDisk[f] {
			t.Fatalf("file %s was unlinked before the crash; the hook was to run before", f)
		}
	}

	open := func() *bookie.Store {
		t.Helper()
		st, err := bookie.OpenStore(r.dir, bookie.StoreOptions{FS: bookie.NewPowerLossStoreFS(), Logger: gcLogger(), MemTableSizeBytes: 4 << 20})
		if err != nil {
			t.Fatalf("open after the crash: %v", err)
		}
		return st
	}
	st := open()
	checkCollected(t, st, gone, n)
	checkStored(t, st, live, n)
	cookie, _ := st.Cookie()
	reg := cluster.NewBookieRegistry(r.store, 0)
	res, err := bookie.CollectGarbageWith(r.ctx(), st, reg, reg, cookie)
	if err != nil {
		t.Fatalf("pass after the crash: %v", err)
	}
	if res.LedgersDeleted != 0 || res.FilesRemoved < len(goneFiles) {
		t.Errorf("pass after the crash: %+v; want the %d files left behind removed", res, len(goneFiles))
	}
	after := logFiles(t, st)
	for _, f := range goneFiles {
		if _, ok := after[f]; ok {
			t.Errorf("file %s is still on disk after the second pass", f)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open()
	defer st.Close()
	checkCollected(t, st, gone, n)
	checkStored(t, st, live, n)
}

// runCrashChild runs test in a child process on the rig's data dir, where
// it is killed (-9) in its pass.
func runCrashChild(t *testing.T, test string, r *gcRig) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MERIDIAN_GC_CRASH_DIR="+r.dir, "MERIDIAN_GC_CRASH_ETCD="+r.url)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was to be killed in the pass: %v\n%s", err, out)
	}
}

// gcCrashChild runs a pass on the data dir and is killed by the hook:
// after the index deletions, or (compact) after compaction's moves.
func gcCrashChild(t *testing.T, dir, url string, compact bool) {
	t.Cleanup(bookie.SetEntryLogFileBytes(gcLogFileBytes))
	st, err := bookie.OpenStore(dir, bookie.StoreOptions{FS: bookie.NewPowerLossStoreFS(), Logger: gcLogger(), MemTableSizeBytes: 4 << 20})
	if err != nil {
		t.Fatalf("child: open: %v", err)
	}
	reg := cluster.NewBookieRegistry(testutil.Store(t, url, gcPrefix), 0)
	cookie, _ := st.Cookie()
	kill := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
	if compact {
		bookie.SetCompactedHook(kill)
		res, err := bookie.CompactWith(context.Background(), st, reg, reg, cookie, 0.2)
		t.Fatalf("child: the pass returned: %+v, %v", res, err)
	}
	bookie.SetGCHooks(nil, kill)
	res, err := bookie.CollectGarbageWith(context.Background(), st, reg, reg, cookie)
	t.Fatalf("child: the pass returned: %+v, %v", res, err)
}

// A bookie killed (-9, losing what was not synced) after compaction wrote
// the live entries again and before it unlinked the compacted files opens
// cleanly with every live entry readable, and the next pass removes the
// files.
func TestGCCrashDuringCompaction(t *testing.T) {
	if dir := os.Getenv("MERIDIAN_GC_CRASH_DIR"); dir != "" {
		gcCrashChild(t, dir, os.Getenv("MERIDIAN_GC_CRASH_ETCD"), true)
		return
	}
	r := newGCRig(t, func(c *bookie.Config) { *c = c.SimulatePowerLoss() })
	const live, per = 8, 10
	wLive, wDel := r.create(), r.create()
	for range live {
		r.append(wLive, 1)
		r.append(wDel, per-1)
	}
	for _, w := range []*ledger.Writer{wLive, wDel} {
		if err := w.Close(r.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	r.delete(wDel.ID())
	var sparse []string // every file but the current one: about 10% live
	fl, err := bookie.FileLedgers(r.srv.Store())
	if err != nil {
		t.Fatal(err)
	}
	cur, err := bookie.CurrentLogFile(r.srv.Store())
	if err != nil {
		t.Fatal(err)
	}
	for f, ls := range fl {
		if f != cur && ls[wLive.ID()] {
			sparse = append(sparse, filepath.Base(bookie.EntryLogPath(r.srv.Store(), f)))
		}
	}
	if len(sparse) < 3 {
		t.Fatalf("want at least 3 sparse files, got %v", sparse)
	}
	if err := r.srv.Close(); err != nil {
		t.Fatal(err)
	}
	runCrashChild(t, "TestGCCrashDuringCompaction", r)
	for _, f := range sparse {
		if _, err := os.Stat(filepath.Join(r.dir, "entrylog", f)); err != nil {
			t.Fatalf("file %s was unlinked before the crash; the hook was to run before: %v", f, err)
		}
	}
	open := func() *bookie.Store {
		t.Helper()
		st, err := bookie.OpenStore(r.dir, bookie.StoreOptions{FS: bookie.NewPowerLossStoreFS(), Logger: gcLogger(), MemTableSizeBytes: 4 << 20})
		if err != nil {
			t.Fatalf("open after the crash: %v", err)
		}
		return st
	}
	st := open()
	checkStored(t, st, wLive.ID(), live)
	checkCollected(t, st, wDel.ID(), live*(per-1))
	cookie, _ := st.Cookie()
	reg := cluster.NewBookieRegistry(r.store, 0)
	res, err := bookie.CompactWith(r.ctx(), st, reg, reg, cookie, 0.2)
	if err != nil {
		t.Fatalf("pass after the crash: %+v, %v", res, err)
	}
	after := logFiles(t, st)
	for _, f := range sparse {
		if _, ok := after[f]; ok {
			t.Errorf("compacted file %s is still on disk after the pass that followed the crash (%+v)", f, res)
		}
	}
	checkStored(t, st, wLive.ID(), live)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open()
	defer st.Close()
	checkStored(t, st, wLive.ID(), live)
}

// The GC loop runs a pass every gc_interval on its own.
func TestGCLoopRunsEveryInterval(t *testing.T) {
	r := newGCRig(t, func(c *bookie.Config) { c.GCInterval = 200 * time.Millisecond })
	const n = 30
	gone, live := r.write(n), r.write(n)
	r.delete(gone)
	testutil.Eventually(t, 30*time.Second, "the loop collected the deleted ledger", func() bool {
		_, _, _, err := r.srv.Store().Read(gone, 0)
		return errors.Is(err, bookie.ErrNoSuchLedger)
	})
	checkCollected(t, r.srv.Store(), gone, n)
	checkStored(t, r.srv.Store(), live, n)
	if got := metricValue(t, r.srv, "meridian_bookie_gc_deleted_ledgers_total"); got != 1 {
		t.Errorf("meridian_bookie_gc_deleted_ledgers_total = %v, want 1", got)
	}
}

// Compaction: files whose live entries fill less than the threshold have
// them written again at the end of the log and are removed; the live
// ledger reads back byte for byte, before and after a restart.
func TestGCCompactsPartlyLiveFiles(t *testing.T) {
	r := newGCRig(t, func(c *bookie.Config) { c.CompactionThreshold = 0.2 })
	const live, per = 8, 10 // one live entry in ten
	wLive, wDel := r.create(), r.create()
	for range live {
		r.append(wLive, 1)
		r.append(wDel, per-1)
	}
	for _, w := range []*ledger.Writer{wLive, wDel} {
		if err := w.Close(r.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	full := r.write(20) // a live ledger of whole files: left alone
	r.delete(wDel.ID())
	st := r.srv.Store()
	fl, err := bookie.FileLedgers(st)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := bookie.CurrentLogFile(st)
	if err != nil {
		t.Fatal(err)
	}
	var sparse []string // files holding wLive and wDel only, not current
	for f, ls := range fl {
		if f != cur && ls[wLive.ID()] && !ls[full] {
			sparse = append(sparse, filepath.Base(bookie.EntryLogPath(st, f)))
		}
	}
	if len(sparse) < 3 {
		t.Fatalf("want at least 3 sparse files, got %v", sparse)
	}
	// A read-only store (disk at its threshold) compacts nothing: it
	// would write before it frees.
	st.SetReadOnly(true)
	res, err := r.srv.CollectGarbage(r.ctx())
	if err != nil || res.FilesCompacted != 0 {
		t.Fatalf("pass while read-only: %+v, %v; want no compaction", res, err)
	}
	st.SetReadOnly(false)
	res, err = r.srv.CollectGarbage(r.ctx())
	if err != nil {
		t.Fatalf("pass: %+v, %v", res, err)
	}
	t.Logf("pass: %+v; sparse files %v", res, sparse)
	after := logFiles(t, st)
	for _, f := range sparse {
		if _, ok := after[f]; ok {
			t.Errorf("sparse file %s (10%% live) is still on disk", f)
		}
	}
	if res.FilesCompacted < len(sparse) || res.BytesRewritten <= 0 {
		t.Errorf("compacted %d files (%d bytes), want at least %d", res.FilesCompacted, res.BytesRewritten, len(sparse))
	}
	if got := metricValue(t, r.srv, "meridian_bookie_gc_compacted_files_total"); got != float64(res.FilesCompacted) {
		t.Errorf("meridian_bookie_gc_compacted_files_total = %v, want %d", got, res.FilesCompacted)
	}
	r.readAll(wLive.ID(), live)
	r.readAll(full, 20)
	checkCollected(t, st, wDel.ID(), live*(per-1))
	if err := r.srv.Close(); err != nil {
		t.Fatal(err)
	}
	r.start()
	st = r.srv.Store()
	checkStored(t, st, wLive.ID(), live)
	checkStored(t, st, full, 20)
	if res, err := r.srv.CollectGarbage(r.ctx()); err != nil {
		t.Fatalf("pass after restart: %+v, %v", res, err)
	}
	checkStored(t, st, wLive.ID(), live)
	checkStored(t, st, full, 20)
}
