package bookie

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/digest"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/proto/metapb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Process-wide background goroutines of dependencies, started once.
		goleak.IgnoreAnyFunction("github.com/cockroachdb/pebble/v2/internal/cache.(*shard).releaseLoop"),
		goleak.IgnoreAnyFunction("github.com/cockroachdb/pebble/v2/internal/cache.releaseLoop"),
		goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

// testLogger shows warnings and errors on stderr; info is noise in tests.
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// entry builds a valid add.
func entry(ledger, id, lac int64, payload []byte) Entry {
	return Entry{LedgerID: ledger, EntryID: id, LAC: lac, Payload: payload, Digest: digest.Entry(ledger, id, lac, payload)}
}

func recoveryEntry(ledger, id, lac int64, payload []byte) Entry {
	e := entry(ledger, id, lac, payload)
	e.Recovery = true
	return e
}

func payloadFor(ledger, id int64) []byte {
	return []byte(fmt.Sprintf("ledger-%d-entry-%d-%s", ledger, id, strings.Repeat("x", int(id%17))))
}

func openMemStore(t *testing.T, fs vfs.FS, opts StoreOptions) *Store {
	t.Helper()
	opts.FS = fs
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	s, err := OpenStore("/data", opts)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	return s
}

// countingFS counts syncs of files and can simulate their latency and make
// WAL syncs fail (ENOSPC).
type countingFS struct {
	vfs.FS
	syncs     atomic.Int64
	syncDelay time.Duration
	failWAL   atomic.Bool
}

func (fs *countingFS) wrap(f vfs.File, name string, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return &countingFile{File: f, fs: fs, wal: strings.HasSuffix(name, ".log")}, nil
}

func (fs *countingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(f, name, err)
}

func (fs *countingFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	return fs.wrap(f, name, err)
}

func (fs *countingFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(f, name, err)
}

func (fs *countingFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	return fs.wrap(f, name, err)
}

func (fs *countingFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(f, newname, err)
}

func (fs *countingFS) Unwrap() vfs.FS { return fs.FS }

type countingFile struct {
	vfs.File
	fs  *countingFS
	wal bool
}

func (f *countingFile) sync() error {
	f.fs.syncs.Add(1)
	if f.wal && f.fs.failWAL.Load() {
		return syscall.ENOSPC
	}
	if f.fs.syncDelay > 0 {
		// Simulated device latency: while one commit syncs, others queue.
		time.Sleep(f.fs.syncDelay)
	}
	return nil
}

func (f *countingFile) Sync() error {
	if err := f.sync(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *countingFile) SyncData() error {
	if err := f.sync(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *countingFile) SyncTo(length int64) (bool, error) {
	if err := f.sync(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

func (f *countingFile) Write(p []byte) (int, error) {
	if f.wal && f.fs.failWAL.Load() {
		return 0, syscall.ENOSPC
	}
	return f.File.Write(p)
}

// fakeRegistry is an in-memory Registry.
type fakeRegistry struct {
	mu           sync.Mutex
	cookies      map[string]*metapb.Cookie
	highWater    int64
	regs         []*metapb.BookieRegistration
	registered   bool
	deregistered int
}

func newFakeRegistry() *fakeRegistry {
	return &fakeRegistry{cookies: make(map[string]*metapb.Cookie)}
}

func (r *fakeRegistry) GetCookie(_ context.Context, id string) (*metapb.Cookie, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.cookies[id]
	if !ok {
		return nil, false, nil
	}
	return proto.Clone(c).(*metapb.Cookie), true, nil
}

func (r *fakeRegistry) PutCookie(_ context.Context, c *metapb.Cookie) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cookies[c.GetBookieId()] = proto.Clone(c).(*metapb.Cookie)
	return nil
}

func (r *fakeRegistry) LedgerIDHighWater(context.Context) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highWater, nil
}

func (r *fakeRegistry) Register(_ context.Context, reg *metapb.BookieRegistration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.regs = append(r.regs, proto.Clone(reg).(*metapb.BookieRegistration))
	r.registered = true
	return nil
}

func (r *fakeRegistry) Deregister(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registered = false
	r.deregistered++
	return nil
}

func (r *fakeRegistry) last() *metapb.BookieRegistration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.regs) == 0 {
		return nil
	}
	return r.regs[len(r.regs)-1]
}

func (r *fakeRegistry) cookie(id string) *metapb.Cookie {
	c, _, _ := r.GetCookie(context.Background(), id)
	return c
}

func cookieFor(id string, limbo int64) *metapb.Cookie {
	return &metapb.Cookie{BookieId: id, InstanceId: newInstanceID(), LimboBelowOrAt: limbo}
}
