package bookie

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/digest"

	"github.com/cockroachdb/pebble/v2/vfs"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/proto/bookiepb"
)

func testConfig(t *testing.T, dir string) Config {
	cfg := DefaultConfig()
	cfg.ID = "bookie-1"
	cfg.Region = "eu"
	cfg.Rack = "r1"
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.MemTableSizeBytes = 4 << 20
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Logger = testLogger()
	return cfg
}

// startServer runs a Server over real loopback TCP and returns a client; both
// close with the test.
func startServer(t *testing.T, cfg Config, reg Registry) (*Server, bookiepb.BookieClient) {
	t.Helper()
	s, err := New(cfg, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		t.Fatalf("Start: %v", err)
	}
	conn, err := grpc.NewClient(s.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, bookiepb.NewBookieClient(conn)
}

func addReq(reqID uint64, ledger, id, lac int64, payload []byte) *bookiepb.AddRequest {
	return &bookiepb.AddRequest{RequestId: reqID, LedgerId: ledger, EntryId: id, Lac: lac, Payload: payload, Digest: digest.Entry(ledger, id, lac, payload)}
}

// addOne sends one add on its own stream and returns the response.
func addOne(t *testing.T, c bookiepb.BookieClient, req *bookiepb.AddRequest) *bookiepb.AddResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v", err)
	}
	if resp.GetRequestId() != req.GetRequestId() {
		t.Fatalf("response for request %d, sent %d", resp.GetRequestId(), req.GetRequestId())
	}
	return resp
}

func readEntry(t *testing.T, c bookiepb.BookieClient, ledger, entry int64, fence bool) *bookiepb.ReadEntryResponse {
	t.Helper()
	r, err := c.ReadEntry(context.Background(), &bookiepb.ReadEntryRequest{LedgerId: ledger, EntryId: entry, Fence: fence})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readLac(t *testing.T, c bookiepb.BookieClient, ledger int64, fence bool) *bookiepb.ReadLacResponse {
	t.Helper()
	r, err := c.ReadLac(context.Background(), &bookiepb.ReadLacRequest{LedgerId: ledger, Fence: fence})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func counterValue(t *testing.T, s *Server, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := s.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Requirement: one AddEntries stream pipelines adds: the client sends many
// without waiting, the bookie answers each (matched by request_id) once it is
// durable; fencing through ReadLac/ReadEntry then refuses normal adds.
func TestServerPipelinedAddsAndFencing(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.MaxEntryBytes = 64 << 10
	cfg.MaxInflightPerStream = 32 // smaller than the burst: exercises back-pressure
	s, c := startServer(t, cfg, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const perLedger = 100
	ledgers := []int64{1, 2, 3}
	type sent struct{ ledger, entry int64 }
	want := make(map[uint64]sent)
	var reqID uint64
	recvDone := make(chan map[uint64]*bookiepb.AddResponse)
	go func() {
		got := make(map[uint64]*bookiepb.AddResponse)
		for len(got) < perLedger*len(ledgers) {
			r, err := st.Recv()
			if err != nil {
				t.Errorf("recv: %v", err)
				break
			}
			got[r.GetRequestId()] = r
		}
		recvDone <- got
	}()
	for i := range int64(perLedger) {
		for _, l := range ledgers {
			reqID += 7 // ids need not be dense
			want[reqID] = sent{l, i}
			if err := st.Send(addReq(reqID, l, i, i-1, payloadFor(l, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := <-recvDone
	for id, w := range want {
		r := got[id]
		if r == nil {
			t.Fatalf("no response for request %d", id)
		}
		if r.GetStatus() != bookiepb.Status_OK || r.GetLedgerId() != w.ledger || r.GetEntryId() != w.entry {
			t.Fatalf("request %d (%v): %v", id, w, r)
		}
	}
	if n := counterValue(t, s, "meridian_bookie_adds_total", map[string]string{"status": "OK", "region": "eu", "rack": "r1", "bookie": "bookie-1"}); n != float64(len(want)) {
		t.Fatalf("adds_total{OK} = %v, want %d", n, len(want))
	}
	if n := counterValue(t, s, "meridian_bookie_group_commits_total", nil); n < 1 || n > float64(len(want)) {
		t.Fatalf("group commits = %v", n)
	}
	if n := counterValue(t, s, "meridian_bookie_group_commit_entries", nil); n < 1 {
		t.Fatalf("entries-per-commit histogram is empty")
	}

	for _, l := range ledgers {
		for _, i := range []int64{0, 50, perLedger - 1} {
			r := readEntry(t, c, l, i, false)
			if r.GetStatus() != bookiepb.Status_OK || !bytes.Equal(r.GetPayload(), payloadFor(l, i)) || r.GetLac() != i-1 ||
				r.GetDigest() != digest.Entry(l, i, i-1, r.GetPayload()) {
				t.Fatalf("read %d/%d: %v", l, i, r)
			}
		}
	}
	if r := readLac(t, c, 1, false); r.GetStatus() != bookiepb.Status_OK || r.GetLac() != perLedger-2 || r.GetLastEntryId() != perLedger-1 || r.GetFenced() {
		t.Fatalf("ReadLac(1): %v", r)
	}

	// Fence ledger 1 through ReadLac and ledger 2 through a recovery read.
	if r := readLac(t, c, 1, true); r.GetStatus() != bookiepb.Status_OK || !r.GetFenced() || r.GetLastEntryId() != perLedger-1 {
		t.Fatalf("fencing ReadLac(1): %v", r)
	}
	if r := readEntry(t, c, 2, perLedger-1, true); r.GetStatus() != bookiepb.Status_OK {
		t.Fatalf("fencing ReadEntry(2): %v", r)
	}
	if r := readEntry(t, c, 2, perLedger, true); r.GetStatus() != bookiepb.Status_NO_SUCH_ENTRY {
		t.Fatalf("fencing ReadEntry past the end: %v", r)
	}
	// The same stream keeps working; normal adds to fenced ledgers are refused.
	check := func(req *bookiepb.AddRequest, want bookiepb.Status) {
		t.Helper()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetRequestId() != req.GetRequestId() || r.GetStatus() != want {
			t.Fatalf("add %d/%d: %v, want %v", req.GetLedgerId(), req.GetEntryId(), r, want)
		}
	}
	check(addReq(1001, 1, perLedger, perLedger-1, []byte("late")), bookiepb.Status_FENCED)
	check(addReq(1002, 2, perLedger, perLedger-1, []byte("late")), bookiepb.Status_FENCED)
	rec := addReq(1003, 1, perLedger, perLedger-1, []byte("recovered"))
	rec.Recovery = true
	check(rec, bookiepb.Status_OK)
	check(addReq(1004, 3, perLedger, perLedger-1, []byte("not fenced")), bookiepb.Status_OK)

	// Malformed adds.
	bad := addReq(1005, 3, perLedger+1, perLedger, []byte("flipped"))
	bad.Digest ^= 1
	check(bad, bookiepb.Status_CORRUPT)
	check(addReq(1006, 3, -1, -1, nil), bookiepb.Status_INVALID)
	check(addReq(1007, 3, perLedger+1, perLedger, make([]byte, cfg.MaxEntryBytes+1)), bookiepb.Status_INVALID)
	check(addReq(1008, 3, 0, -1, []byte("different content")), bookiepb.Status_INVALID)
	check(addReq(1009, 3, 0, -1, payloadFor(3, 0)), bookiepb.Status_OK) // idempotent retry

	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v", err)
	}

	info, err := c.Info(context.Background(), &bookiepb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetBookieId() != "bookie-1" || info.GetRegion() != "eu" || info.GetRack() != "r1" || info.GetInstanceId() == "" ||
		info.GetFormatVersion() != FormatVersion || info.GetReadOnly() || info.GetLimbo() || info.GetDiskTotalBytes() == 0 {
		t.Fatalf("Info: %v", info)
	}
}

// Requirement (BookKeeper #2908): a damaged entry is answered CORRUPT over
// the wire, never NO_SUCH_ENTRY.
func TestServerCorruptEntryAnswersCORRUPT(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(3) {
		if err := s.Store().Add(entry(5, i, i-1, payloadFor(5, i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := FlipEntryByte(dir, 5, 1, 3); err != nil {
		t.Fatal(err)
	}
	s, c := startServer(t, cfg, nil)
	if r := readEntry(t, c, 5, 1, false); r.GetStatus() != bookiepb.Status_CORRUPT {
		t.Fatalf("read of a flipped entry: %v", r)
	}
	if r := readEntry(t, c, 5, 1, true); r.GetStatus() != bookiepb.Status_CORRUPT {
		t.Fatalf("fencing read of a flipped entry: %v", r)
	}
	if r := readEntry(t, c, 5, 2, false); r.GetStatus() != bookiepb.Status_OK {
		t.Fatalf("intact neighbour: %v", r)
	}
	if n := counterValue(t, s, "meridian_bookie_reads_total", map[string]string{"status": "CORRUPT"}); n != 2 {
		t.Fatalf("reads_total{CORRUPT} = %v", n)
	}
}

// Requirement (BookKeeper #544, #2612, #4812): a bookie that comes back with
// a wiped disk under the same identity answers UNKNOWN, never NO_SUCH_*, for
// ledgers that existed before the wipe; refuses their normal adds; accepts
// recovery adds; and behaves normally for newer ledgers.
func TestServerLimboAfterWipedDisk(t *testing.T) {
	reg := newFakeRegistry()
	old := cookieFor("bookie-1", 0)
	reg.cookies["bookie-1"] = old
	reg.highWater = 10
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	s, c := startServer(t, cfg, reg)

	ck := s.Cookie()
	if ck.GetLimboBelowOrAt() != 10 || ck.GetInstanceId() == old.GetInstanceId() || ck.GetInstanceId() == "" {
		t.Fatalf("cookie after wipe: %v (old instance %s)", ck, old.GetInstanceId())
	}
	if got := reg.cookie("bookie-1"); got.GetInstanceId() != ck.GetInstanceId() || got.GetLimboBelowOrAt() != 10 {
		t.Fatalf("registry cookie: %v", got)
	}
	if r := reg.last(); r == nil || r.GetInstanceId() != ck.GetInstanceId() || r.GetAddr() != s.Addr() || r.GetReadOnly() {
		t.Fatalf("registration: %v (addr %s)", r, s.Addr())
	}

	if r := readEntry(t, c, 5, 0, false); r.GetStatus() != bookiepb.Status_UNKNOWN {
		t.Fatalf("read of limbo ledger: %v", r)
	}
	if r := readLac(t, c, 5, false); r.GetStatus() != bookiepb.Status_UNKNOWN {
		t.Fatalf("ReadLac of limbo ledger: %v", r)
	}
	if r := addOne(t, c, addReq(1, 5, 0, -1, []byte("new"))); r.GetStatus() != bookiepb.Status_UNKNOWN {
		t.Fatalf("normal add to limbo ledger: %v", r)
	}
	rec := addReq(2, 5, 3, 2, []byte("recovered"))
	rec.Recovery = true
	if r := addOne(t, c, rec); r.GetStatus() != bookiepb.Status_OK {
		t.Fatalf("recovery add to limbo ledger: %v", r)
	}
	if r := readEntry(t, c, 5, 3, false); r.GetStatus() != bookiepb.Status_OK || string(r.GetPayload()) != "recovered" {
		t.Fatalf("recovered entry: %v", r)
	}
	if r := readEntry(t, c, 5, 2, false); r.GetStatus() != bookiepb.Status_UNKNOWN {
		t.Fatalf("missing entry of a limbo ledger: %v", r)
	}
	if r := readLac(t, c, 5, true); r.GetStatus() != bookiepb.Status_UNKNOWN || !r.GetFenced() {
		t.Fatalf("fencing ReadLac of a limbo ledger: %v", r)
	}

	// Ledger 11 was created after the wipe: normal.
	if r := readEntry(t, c, 11, 0, false); r.GetStatus() != bookiepb.Status_NO_SUCH_LEDGER {
		t.Fatalf("read of absent ledger 11: %v", r)
	}
	if r := readLac(t, c, 11, false); r.GetStatus() != bookiepb.Status_NO_SUCH_LEDGER {
		t.Fatalf("ReadLac of absent ledger 11: %v", r)
	}
	if r := addOne(t, c, addReq(3, 11, 0, -1, []byte("fresh"))); r.GetStatus() != bookiepb.Status_OK {
		t.Fatalf("add to ledger 11: %v", r)
	}
	if r := readEntry(t, c, 11, 1, false); r.GetStatus() != bookiepb.Status_NO_SUCH_ENTRY {
		t.Fatalf("read past the end of ledger 11: %v", r)
	}
	info, err := c.Info(context.Background(), &bookiepb.InfoRequest{})
	if err != nil || !info.GetLimbo() {
		t.Fatalf("Info.limbo: %v %v", info, err)
	}

	// A restart keeps the identity and the limbo.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, c2 := startServer(t, cfg, reg)
	if s2.Cookie().GetInstanceId() != ck.GetInstanceId() {
		t.Fatalf("restart changed the instance: %s -> %s", ck.GetInstanceId(), s2.Cookie().GetInstanceId())
	}
	if r := readEntry(t, c2, 5, 2, false); r.GetStatus() != bookiepb.Status_UNKNOWN {
		t.Fatalf("after restart, missing entry of a limbo ledger: %v", r)
	}
	if r := readEntry(t, c2, 5, 3, false); r.GetStatus() != bookiepb.Status_OK {
		t.Fatalf("after restart, recovered entry: %v", r)
	}
}

// Requirement: at or above the disk-usage threshold the bookie refuses adds
// with READ_ONLY, keeps serving reads, re-registers read-only, loses nothing
// it acknowledged, and turns writable when usage drops.
func TestServerReadOnlyOnDiskUsage(t *testing.T) {
	reg := newFakeRegistry()
	cfg := testConfig(t, "/data")
	cfg.fs = vfs.NewMem()
	cfg.DiskCheckInterval = time.Hour // the test drives the checks
	var usedPermille atomic.Int64
	usedPermille.Store(500)
	cfg.diskUsage = func() (vfs.DiskUsage, error) {
		used := uint64(usedPermille.Load()) << 20
		return vfs.DiskUsage{TotalBytes: 1000 << 20, UsedBytes: used, AvailBytes: 1000<<20 - used}, nil
	}
	s, c := startServer(t, cfg, reg)

	acked := 0
	for i := range int64(10) {
		if r := addOne(t, c, addReq(uint64(i), 1, i, i-1, payloadFor(1, i))); r.GetStatus() != bookiepb.Status_OK {
			t.Fatalf("add %d: %v", i, r)
		}
		acked++
	}
	usedPermille.Store(950)
	s.refresh()
	if r := addOne(t, c, addReq(100, 1, 10, 9, payloadFor(1, 10))); r.GetStatus() != bookiepb.Status_READ_ONLY {
		t.Fatalf("add at the threshold: %v", r)
	}
	if r := reg.last(); !r.GetReadOnly() {
		t.Fatalf("registration not updated to read-only: %v", r)
	}
	info, _ := c.Info(context.Background(), &bookiepb.InfoRequest{})
	if !info.GetReadOnly() || info.GetDiskUsedBytes() != 950<<20 {
		t.Fatalf("Info while read-only: %v", info)
	}
	if v := counterValue(t, s, "meridian_bookie_read_only", nil); v != 1 {
		t.Fatalf("read_only gauge = %v", v)
	}
	if v := counterValue(t, s, "meridian_bookie_disk_usage_ratio", nil); v != 0.95 {
		t.Fatalf("disk usage gauge = %v", v)
	}
	for i := range int64(acked) {
		if r := readEntry(t, c, 1, i, false); r.GetStatus() != bookiepb.Status_OK || !bytes.Equal(r.GetPayload(), payloadFor(1, i)) {
			t.Fatalf("read %d while read-only: %v", i, r)
		}
	}
	// Fencing still works on a read-only bookie (recovery needs it).
	if r := readLac(t, c, 1, true); r.GetStatus() != bookiepb.Status_OK || !r.GetFenced() || r.GetLastEntryId() != 9 {
		t.Fatalf("fence while read-only: %v", r)
	}

	usedPermille.Store(900)
	s.refresh()
	if r := reg.last(); r.GetReadOnly() {
		t.Fatalf("registration not updated to writable: %v", r)
	}
	if r := addOne(t, c, addReq(101, 2, 0, -1, []byte("again"))); r.GetStatus() != bookiepb.Status_OK {
		t.Fatalf("add after usage dropped: %v", r)
	}
}

// Requirement: commits trigger a disk check once they have written the
// budget the last check left (an eighth of the headroom below the
// threshold), not after every commit, and that alone turns the bookie
// read-only near the threshold (the periodic check is off here).
func TestServerDiskCheckAfterWrittenBudget(t *testing.T) {
	cfg := testConfig(t, "/data")
	cfg.fs = vfs.NewMem()
	cfg.DiskCheckInterval = time.Hour
	const total, start = 1000 << 20, 900 << 20 // threshold 0.95: 50 MiB of headroom
	var written, checks atomic.Int64
	cfg.diskUsage = func() (vfs.DiskUsage, error) {
		checks.Add(1)
		used := uint64(start + 8*written.Load()) // every byte written counts 8 times
		return vfs.DiskUsage{TotalBytes: total, UsedBytes: used, AvailBytes: total - used}, nil
	}
	s, c := startServer(t, cfg, nil)
	if b := s.diskBudget.Load(); b != 50<<20/8 {
		t.Fatalf("budget after the first check = %d, want %d (an eighth of the headroom)", b, 50<<20/8)
	}
	payload := bytes.Repeat([]byte("p"), 64<<10)
	before := checks.Load()
	// 50 MiB of headroom is 6.25 MiB written (100 entries): the threshold is
	// crossed at the 100th entry, and the first check after it is due then.
	n := int64(0)
	for ; n < 200; n++ {
		r := addOne(t, c, addReq(uint64(n), 1, n, n-1, payload))
		if r.GetStatus() == bookiepb.Status_READ_ONLY {
			break
		}
		if r.GetStatus() != bookiepb.Status_OK {
			t.Fatalf("add %d: %v", n, r)
		}
		written.Add(int64(len(payload)))
		if n == 50 {
			if got := checks.Load() - before; got != 0 {
				t.Fatalf("%d disk checks after 51 commits of 3 MiB in all; want none before the 6.25 MiB budget is written", got)
			}
		}
	}
	if n < 90 || n >= 150 {
		t.Fatalf("read-only after %d entries; want it soon after the threshold (100 entries)", n)
	}
	if got := checks.Load() - before; got > 10 {
		t.Fatalf("%d disk checks for %d commits; want a few (one per budget written)", got, n)
	}
}

// Requirement: on a real, small filesystem the bookie turns read-only before
// the disk is full, and every acknowledged entry reads back.
func TestServerOnSmallFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a 96 MiB tmpfs (CI runs as root)")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); this test needs CAP_SYS_ADMIN", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	cfg := testConfig(t, filepath.Join(mnt, "data"))
	cfg.MemTableSizeBytes = 4 << 20
	cfg.DiskUsageThreshold = 0.7
	cfg.DiskCheckInterval = 50 * time.Millisecond
	s, c := startServer(t, cfg, nil)

	const size = 64 << 10
	payload := func(i int64) []byte {
		p := make([]byte, size)
		rng := rand.New(rand.NewPCG(uint64(i), 42)) // incompressible, reproducible
		for j := 0; j < size; j += 8 {
			v := rng.Uint64()
			for k := 0; k < 8; k++ {
				p[j+k] = byte(v >> (8 * k))
			}
		}
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := c.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const window = 16
	const maxEntries = 96 << 20 / size * 2 // twice what fits: read-only must come first
	var (
		mu       sync.Mutex
		acked    []int64
		readOnly bool
	)
	sem := make(chan struct{}, window)
	recvDone := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err == io.EOF {
				recvDone <- nil
				return
			}
			if err != nil {
				recvDone <- err
				return
			}
			mu.Lock()
			switch r.GetStatus() {
			case bookiepb.Status_OK:
				acked = append(acked, r.GetEntryId())
			case bookiepb.Status_READ_ONLY:
				readOnly = true
			default:
				recvDone <- errors.New("unexpected add status " + r.GetStatus().String() + ": " + r.GetMessage())
				mu.Unlock()
				return
			}
			mu.Unlock()
			<-sem
		}
	}()
	var sent int64
	for sent = 0; sent < maxEntries; sent++ {
		mu.Lock()
		ro := readOnly
		mu.Unlock()
		if ro {
			break
		}
		sem <- struct{}{}
		if err := st.Send(addReq(uint64(sent), 1, sent, -1, payload(sent))); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := <-recvDone; err != nil {
		t.Fatal(err)
	}
	if !readOnly {
		t.Fatalf("sent %d entries of %d KiB (%d MiB) to a 96 MiB filesystem and never got READ_ONLY", sent, size>>10, sent*size>>20)
	}
	u, err := vfs.Default.GetDiskUsage(mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries acknowledged (%d MiB) before READ_ONLY; filesystem %d/%d MiB used", len(acked), len(acked)*size>>20, u.UsedBytes>>20, u.TotalBytes>>20)
	if u.AvailBytes == 0 {
		t.Fatal("the filesystem filled up: the threshold left no headroom")
	}
	if !s.Store().ReadOnly() || s.Store().Failed() != nil {
		t.Fatalf("store read-only %v failed %v: read-only must come from the threshold, not a failed write", s.Store().ReadOnly(), s.Store().Failed())
	}
	for _, i := range acked {
		r := readEntry(t, c, 1, i, false)
		if r.GetStatus() != bookiepb.Status_OK || !bytes.Equal(r.GetPayload(), payload(i)) {
			t.Fatalf("acknowledged entry %d: status %v %s", i, r.GetStatus(), r.GetMessage())
		}
	}
}

// Requirement: Close ends even with a client stream left open (graceful stop
// gives up after ShutdownTimeout) and deregisters.
func TestServerCloseWithOpenStream(t *testing.T) {
	reg := newFakeRegistry()
	cfg := testConfig(t, "/data")
	cfg.fs = vfs.NewMem()
	cfg.ShutdownTimeout = 100 * time.Millisecond
	s, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := bookiepb.NewBookieClient(conn)
	st, err := c.AddEntries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(addReq(1, 1, 0, -1, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); err != nil || r.GetStatus() != bookiepb.Status_OK {
		t.Fatalf("add: %v %v", r, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err == nil {
		t.Fatal("stream still open after Close")
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.registered || reg.deregistered != 1 {
		t.Fatalf("registered %v, deregistered %d times", reg.registered, reg.deregistered)
	}
}

func TestServerMetricsEndpoint(t *testing.T) {
	cfg := testConfig(t, "/data")
	cfg.fs = vfs.NewMem()
	cfg.MetricsAddr = "127.0.0.1:0"
	s, c := startServer(t, cfg, nil)
	if r := addOne(t, c, addReq(1, 1, 0, -1, []byte("x"))); r.GetStatus() != bookiepb.Status_OK {
		t.Fatal(r)
	}
	resp, err := http.Get("http://" + s.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`meridian_bookie_adds_total{bookie="bookie-1",rack="r1",region="eu",status="OK"} 1`,
		`meridian_bookie_group_commits_total{bookie="bookie-1",rack="r1",region="eu"} 1`,
		`meridian_bookie_add_latency_seconds_count`,
		`meridian_bookie_group_commit_entries_bucket`,
		`meridian_bookie_written_bytes_total`,
		`meridian_bookie_read_only{bookie="bookie-1",rack="r1",region="eu"} 0`,
		`meridian_bookie_disk_usage_ratio`,
		`meridian_bookie_client_auth_required{bookie="bookie-1",rack="r1",region="eu"} 0`, // plaintext: serves any caller
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Issue 29: every status series of the bookie's counters by status
// (adds, reads, fences) exists from the start, at 0 — a bookie that never
// fenced a ledger or read a corrupt entry exports
// meridian_bookie_fences_total{status="OK"} 0 and
// meridian_bookie_reads_total{status="CORRUPT"} 0, so an alert on their
// increase or a dashboard sees a 0, not an absent series.
func TestServerStatusCountersStartAtZero(t *testing.T) {
	cfg := testConfig(t, "/data")
	cfg.fs = vfs.NewMem()
	s, _ := startServer(t, cfg, nil)
	mfs, err := s.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" {
					if got[mf.GetName()] == nil {
						got[mf.GetName()] = map[string]float64{}
					}
					got[mf.GetName()][l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	for _, name := range []string{"meridian_bookie_adds_total", "meridian_bookie_reads_total", "meridian_bookie_fences_total"} {
		for n, st := range bookiepb.Status_name {
			v, ok := got[name][st]
			if !ok || v != 0 {
				t.Errorf("%s{status=%q} (status %d): present %v, value %v; want present at 0", name, st, n, ok, v)
			}
		}
		if len(got[name]) != len(bookiepb.Status_name) {
			t.Errorf("%s has statuses %v, want exactly bookiepb's %d", name, got[name], len(bookiepb.Status_name))
		}
	}
}

// Two bookies in one process have separate metrics.
func TestServersInOneProcess(t *testing.T) {
	a := testConfig(t, "/a")
	a.fs = vfs.NewMem()
	b := testConfig(t, "/b")
	b.fs = vfs.NewMem()
	b.ID = "bookie-2"
	sa, ca := startServer(t, a, nil)
	sb, _ := startServer(t, b, nil)
	addOne(t, ca, addReq(1, 1, 0, -1, []byte("x")))
	if n := counterValue(t, sa, "meridian_bookie_adds_total", map[string]string{"status": "OK"}); n != 1 {
		t.Fatalf("bookie-1 adds = %v", n)
	}
	if n := counterValue(t, sb, "meridian_bookie_adds_total", map[string]string{"status": "OK"}); n != 0 {
		t.Fatalf("bookie-2 adds = %v", n)
	}
}

// ReadEntries (the batch read) returns consecutive entries from the first
// one asked, each with its LAC and digest, and stops at max_entries, at the
// byte budget (the first entry always included), at the first entry it
// cannot serve OK (a gap, a corrupt copy: the reader reads that one singly
// from another replica), and answers the first entry's status when it is
// that one.
func TestServerReadEntries(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(10) {
		if i == 6 {
			continue // a gap at 6
		}
		if err := s.Store().Add(entry(5, i, -1, payloadFor(5, i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := FlipEntryByte(dir, 5, 8, 0); err != nil {
		t.Fatal(err)
	}
	_, c := startServer(t, cfg, nil)
	read := func(first int64, maxEntries int32, maxBytes int64) *bookiepb.ReadEntriesResponse {
		t.Helper()
		r, err := c.ReadEntries(context.Background(), &bookiepb.ReadEntriesRequest{LedgerId: 5, FirstEntryId: first, MaxEntries: maxEntries, MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ids := func(r *bookiepb.ReadEntriesResponse) []int64 {
		var out []int64
		for _, e := range r.GetEntries() {
			if !bytes.Equal(e.GetPayload(), payloadFor(5, e.GetEntryId())) || digest.Entry(5, e.GetEntryId(), e.GetLac(), e.GetPayload()) != e.GetDigest() {
				t.Fatalf("entry %d came back different", e.GetEntryId())
			}
			out = append(out, e.GetEntryId())
		}
		return out
	}
	if r := read(0, 100, 0); r.GetStatus() != bookiepb.Status_OK || fmt.Sprint(ids(r)) != "[0 1 2 3 4 5]" {
		t.Fatalf("read from 0: %v %v, want OK [0..5] (stop at the gap)", r.GetStatus(), ids(r))
	}
	if r := read(1, 3, 0); fmt.Sprint(ids(r)) != "[1 2 3]" {
		t.Fatalf("max_entries 3: %v", ids(r))
	}
	one := int64(len(payloadFor(5, 2)))
	if r := read(2, 100, one+1); fmt.Sprint(ids(r)) != "[2]" {
		t.Fatalf("budget of one entry: %v", ids(r))
	}
	if r := read(2, 100, 1); fmt.Sprint(ids(r)) != "[2]" {
		t.Fatalf("a budget below the first entry still returns it: %v", ids(r))
	}
	if r := read(7, 100, 0); r.GetStatus() != bookiepb.Status_OK || fmt.Sprint(ids(r)) != "[7]" {
		t.Fatalf("read from 7: %v %v, want OK [7] (stop before the corrupt 8)", r.GetStatus(), ids(r))
	}
	if r := read(8, 100, 0); r.GetStatus() != bookiepb.Status_CORRUPT || len(r.GetEntries()) != 0 {
		t.Fatalf("read from the corrupt 8: %v %v, want CORRUPT", r.GetStatus(), ids(r))
	}
	if r := read(6, 100, 0); r.GetStatus() != bookiepb.Status_NO_SUCH_ENTRY || len(r.GetEntries()) != 0 {
		t.Fatalf("read from the gap: %v %v, want NO_SUCH_ENTRY", r.GetStatus(), ids(r))
	}
}

// One connection holds at most maxConcurrentStreams streams at once: the
// next waits until one ends (gRPC's default would let a caller open
// streams until the bookie ran out of memory).
func TestServerBoundsStreamsPerConnection(t *testing.T) {
	_, c := startServer(t, testConfig(t, t.TempDir()), nil)
	// One call first, so the client has the server's settings.
	addOne(t, c, addReq(1, 7, 0, -1, []byte("x")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancels := make([]context.CancelFunc, 0, maxConcurrentStreams)
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := 0; i < maxConcurrentStreams; i++ {
		sctx, scancel := context.WithCancel(ctx)
		cancels = append(cancels, scancel)
		if _, err := c.AddEntries(sctx); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := c.AddEntries(wctx)
	wcancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("stream %d opened past the bound (err %v)", maxConcurrentStreams+1, err)
	}
	cancels[0]() // one ends: the next gets its place
	wctx, wcancel = context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if _, err := c.AddEntries(wctx); err != nil {
		t.Fatalf("after a stream ended: %v", err)
	}
}
