package mledger

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// parsePos parses "L:E", "earliest" or "latest".
func parsePos(t *testing.T, s string) Position {
	t.Helper()
	switch s {
	case "earliest":
		return Earliest
	case "latest":
		return Latest
	}
	l, e, ok := strings.Cut(s, ":")
	if !ok {
		t.Fatalf("bad position %q", s)
	}
	li, err1 := strconv.ParseInt(l, 10, 64)
	ei, err2 := strconv.ParseInt(e, 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("bad position %q", s)
	}
	return Position{li, ei}
}

// testView: ledgers 10 (3 entries), 11 (empty), 12 (2 entries), 14 (open,
// entries 0..1 confirmed).
func testView() (*view, Position) {
	return &view{spans: []span{{10, 3}, {11, 0}, {12, 2}, {14, 0}}, open: true}, Position{14, 1}
}

// The position arithmetic the cursors rely on: Next crosses ledgers and
// skips empty and missing ones; the open ledger is unbounded above.
func TestViewNextAndCount(t *testing.T) {
	v, lc := testView()
	for _, c := range []struct{ p, want string }{
		{"earliest", "10:0"}, {"9:5", "10:0"}, {"10:0", "10:1"}, {"10:2", "12:0"},
		{"11:-1", "12:0"}, {"12:1", "14:0"}, {"13:0", "14:0"}, {"14:1", "14:2"}, {"latest", "latest"},
	} {
		if got := v.next(parsePos(t, c.p)); got != parsePos(t, c.want) {
			t.Errorf("next(%s) = %s, want %s", c.p, got, c.want)
		}
	}
	for _, c := range []struct{ p, want string }{
		{"earliest", "10:0"}, {"10:3", "12:0"}, {"11:0", "12:0"}, {"12:1", "12:1"}, {"14:5", "14:5"},
	} {
		if got := v.normalize(parsePos(t, c.p)); got != parsePos(t, c.want) {
			t.Errorf("normalize(%s) = %s, want %s", c.p, got, c.want)
		}
	}
	for _, c := range []struct {
		from, to string
		want     int64
	}{
		{"10:0", "14:1", 7}, {"10:2", "12:0", 2}, {"earliest", "latest", 7}, {"12:0", "10:0", 0}, {"14:0", "14:9", 2},
	} {
		if got := v.count(parsePos(t, c.from), parsePos(t, c.to), lc); got != c.want {
			t.Errorf("count(%s, %s) = %d, want %d", c.from, c.to, got, c.want)
		}
	}
	for _, c := range []struct {
		p    string
		want bool
	}{{"10:2", true}, {"10:3", false}, {"11:0", false}, {"14:1", true}, {"14:2", false}, {"13:0", false}} {
		if got := v.stored(parsePos(t, c.p), lc); got != c.want {
			t.Errorf("stored(%s) = %v, want %v", c.p, got, c.want)
		}
	}
	// Without an open ledger (closed, or between ledgers), the position
	// after the last entry is the end of the last ledger.
	closed := &view{spans: []span{{10, 3}, {12, 2}}}
	if got := closed.next(Position{12, 1}); got != (Position{12, 2}) {
		t.Errorf("closed next(12:1) = %s, want 12:2", got)
	}
}

// Cursor semantics, scripted in testdata/cursor: individual acks out of
// order, mark-delete advancing over contiguous acks across ledger
// boundaries, cumulative acks, backlog, rewind, reset.
func TestCursorCore(t *testing.T) {
	var v *view
	var lc Position
	var c *cursorCore
	datadriven.RunTest(t, "testdata/cursor", func(t *testing.T, d *datadriven.TestData) string {
		args := func() []Position {
			var ps []Position
			for _, a := range d.CmdArgs {
				ps = append(ps, parsePos(t, a.Key))
			}
			return ps
		}
		switch d.Cmd {
		case "view":
			// Input: one ledger per line, "id entries" or "id open".
			v = &view{}
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				f := strings.Fields(line)
				id, _ := strconv.ParseInt(f[0], 10, 64)
				if f[1] == "open" {
					v.spans = append(v.spans, span{id: id})
					v.open = true
					continue
				}
				n, _ := strconv.ParseInt(f[1], 10, 64)
				v.spans = append(v.spans, span{id, n})
			}
			var s string
			d.ScanArgs(t, "lc", &s)
			lc = parsePos(t, s)
			return ""
		case "new":
			c = &cursorCore{}
			c.resetTo(v, lc, args()[0])
		case "ack":
			c.ackMany(v, lc, args()...)
		case "ack-cumulative":
			c.ackCumulative(v, lc, args()[0])
		case "rewind":
			c.rewind(v)
		case "reset":
			c.resetTo(v, lc, args()[0])
		case "read":
			// Simulates a reader: every unacked entry from the read
			// position, as Cursor.ReadEntries walks them.
			var out []string
			p := c.readPos
			for {
				p = c.skipAcked(v, p)
				if lc.Less(p) {
					break
				}
				out = append(out, p.String())
				p = v.next(p)
			}
			c.readPos = p
			return strings.Join(out, " ")
		case "acked?":
			var out []string
			for _, p := range args() {
				out = append(out, fmt.Sprintf("%s=%v", p, c.isAcked(p)))
			}
			return strings.Join(out, " ")
		default:
			t.Fatalf("unknown command %s", d.Cmd)
		}
		return fmt.Sprintf("md=%s ranges=%v backlog=%d read=%s", c.markDelete, c.acked, c.backlog(v, lc), c.readPosition(v))
	})
}

func (c *cursorCore) ackMany(v *view, lc Position, ps ...Position) {
	for _, p := range ps {
		c.ack(v, lc, p)
	}
}

func TestRollReason(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxEntriesPerLedger, cfg.MaxSizePerLedgerBytes, cfg.MaxLedgerAge = 10, 1000, time.Hour
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		entries, size int64
		age           time.Duration
		want          string
	}{
		{9, 999, 59 * time.Minute, ""},
		{10, 0, 0, "entries"},
		{1, 1000, 0, "size"},
		{1, 1, time.Hour, "age"},
		{0, 0, 5 * time.Hour, ""}, // an empty ledger is never rolled for age
	} {
		if got := rollReason(&cfg, c.entries, c.size, t0, t0.Add(c.age)); got != c.want {
			t.Errorf("rollReason(%d entries, %d bytes, age %s) = %q, want %q", c.entries, c.size, c.age, got, c.want)
		}
	}
}

// Trimming deletes the longest prefix of closed, consumed ledgers outside
// retention; the current and the last ledger always stay.
func TestLedgersToTrim(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	ls := []LedgerInfo{
		{ID: 1, Entries: 10, SizeBytes: 100, Closed: true, ClosedAt: t0},
		{ID: 2, Entries: 10, SizeBytes: 100, Closed: true, ClosedAt: t0.Add(time.Minute)},
		{ID: 3, Entries: 10, SizeBytes: 100, Closed: true, ClosedAt: t0.Add(2 * time.Minute)},
		{ID: 4, Entries: 3, SizeBytes: 30},
	}
	base := trimInput{ledgers: ls, current: 4, now: t0.Add(3 * time.Minute)}
	for _, c := range []struct {
		name string
		mut  func(*trimInput)
		want []int64
	}{
		{"no durable cursor: everything closed is consumed", func(in *trimInput) {}, []int64{1, 2, 3}},
		{"slowest inside ledger 2", func(in *trimInput) { in.hasDurable, in.slowest = true, Position{2, 8} }, []int64{1}},
		{"slowest at the end of ledger 2", func(in *trimInput) { in.hasDurable, in.slowest = true, Position{2, 9} }, []int64{1, 2}},
		{"slowest before everything", func(in *trimInput) { in.hasDurable, in.slowest = true, Position{1, -1} }, nil},
		{"retention time keeps the young", func(in *trimInput) { in.retentionTime = 150 * time.Second }, []int64{1}},
		{"retention time forever", func(in *trimInput) { in.retentionTime = -1 }, nil},
		{"retention size keeps the newest 200 bytes", func(in *trimInput) { in.retentionBytes = 200 }, []int64{1}},
		{"retention size unlimited", func(in *trimInput) { in.retentionBytes = -1 }, nil},
		{"either retention keeps", func(in *trimInput) { in.retentionTime, in.retentionBytes = 90*time.Second, 200 }, []int64{1}},
		{"no current ledger: the last stays", func(in *trimInput) {
			in.current = 0
			in.ledgers = ls[:3]
		}, []int64{1, 2}},
	} {
		in := base
		c.mut(&in)
		if got := ledgersToTrim(in); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: trim %v, want %v", c.name, got, c.want)
		}
	}
}

// The tail cache evicts oldest first, but never the entries bookies cannot
// serve yet.
func TestTailCacheEvictionAndPin(t *testing.T) {
	c := tailCache{max: 30}
	for e := int64(0); e < 5; e++ {
		c.put(Position{7, e}, make([]byte, 10))
		c.evict(Position{7, 2}) // entries >= 7:2 pinned
	}
	if _, ok := c.get(Position{7, 0}); ok {
		t.Error("7:0 still cached past capacity")
	}
	for e := int64(2); e < 5; e++ {
		if _, ok := c.get(Position{7, e}); !ok {
			t.Errorf("7:%d evicted", e)
		}
	}
	c.max = -1
	c.evict(Position{7, 4})
	if c.len() != 1 || c.size != 10 {
		t.Errorf("disabled cache keeps %d entries (%d bytes), want only the pinned one", c.len(), c.size)
	}
	c.dropBefore(8)
	if c.len() != 0 || c.size != 0 {
		t.Errorf("after dropBefore: %d entries, %d bytes", c.len(), c.size)
	}
}

func TestEscapeName(t *testing.T) {
	names := []string{"public/default/persistent/my-topic", "a", "a/b", "a%2Fb", "ä ö", "sub:1", "..", ""}
	seen := map[string]string{}
	for _, n := range names {
		e := EscapeName(n)
		if strings.Contains(e, "/") {
			t.Errorf("EscapeName(%q) = %q contains '/'", n, e)
		}
		if o, dup := seen[e]; dup {
			t.Errorf("%q and %q both escape to %q", o, n, e)
		}
		seen[e] = n
		back, err := UnescapeName(e)
		if err != nil || back != n {
			t.Errorf("UnescapeName(%q) = %q, %v; want %q", e, back, err, n)
		}
	}
	if got := EscapeName("public/default/persistent/my-topic"); got != "public%2Fdefault%2Fpersistent%2Fmy-topic" {
		t.Errorf("escape = %q", got)
	}
	if got := infoKey("t/1"); got != "/managed-ledgers/t%2F1/info" {
		t.Errorf("infoKey = %q", got)
	}
	if got := cursorKey("t/1", "sub/a"); got != "/managed-ledgers/t%2F1/cursors/sub%2Fa" {
		t.Errorf("cursorKey = %q", got)
	}
}

// The defaults the Config docs state, printed: a golden string, so prose
// and code cannot drift apart.
func TestDefaultConfigGolden(t *testing.T) {
	const want = `quorums: E=3 Qw=3 Qa=2
placement: kind=rack-aware min-racks=2 enforce
max-entries-per-ledger: 50000
max-size-per-ledger-bytes: 1073741824
max-ledger-age: 4h0m0s
retention-time: 0s
retention-size-bytes: 0
cache-size-bytes: 16777216
cursor-persist-interval: 100ms
max-persisted-ack-ranges: 10000
switch-timeout: 30s
`
	if got := DefaultConfig().String(); got != want {
		t.Errorf("DefaultConfig:\n%s\nwant:\n%s", got, want)
	}
	var zero Config
	zero.Store, zero.Ledgers = nil, nil
	filled, err := zero.withDefaults()
	if err == nil {
		t.Error("a config without Store and Ledgers validated")
	}
	if filled.String() != want {
		t.Errorf("zero config with defaults:\n%s", filled.String())
	}
}

// A cursor record keeps the lowest MaxPersistedAckRanges ranges and counts
// the rest (lost on restart, so redelivered, never skipped); records
// round-trip through their protobuf encoding.
func TestCursorRecordCapAndEncoding(t *testing.T) {
	c := &Cursor{props: map[string]int64{"dedup": 7}}
	c.core.markDelete = Position{3, 4}
	for e := int64(6); e < 16; e += 2 {
		c.core.acked = append(c.core.acked, Range{Position{3, e}, Position{3, e}})
	}
	rec := c.recordLocked(2)
	if len(rec.acked) != 2 || rec.dropped != 3 || rec.acked[1].From != (Position{3, 8}) {
		t.Fatalf("capped record: %+v", rec)
	}
	b, err := encodeCursor(rec, time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeCursor("k", b)
	if err != nil {
		t.Fatal(err)
	}
	if back.markDelete != rec.markDelete || fmt.Sprint(back.acked) != fmt.Sprint(rec.acked) || back.props["dedup"] != 7 || back.dropped != 3 {
		t.Fatalf("round trip: %+v, want %+v", back, rec)
	}
	info := infoRecord{state: 1, epoch: 4, ledgers: []LedgerInfo{
		{ID: 5, Entries: 10, SizeBytes: 99, CreatedAt: time.UnixMilli(1000), ClosedAt: time.UnixMilli(2000), Closed: true},
		{ID: 9, CreatedAt: time.UnixMilli(3000)},
	}}
	b, err = encodeInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	gotInfo, err := decodeInfo("k", b)
	if err != nil || fmt.Sprint(gotInfo) != fmt.Sprint(info) {
		t.Fatalf("info round trip: %+v (%v), want %+v", gotInfo, err, info)
	}
}

// Partly acknowledged batches (Pulsar's batchDeletedIndexes): kept for
// stored, unacknowledged entries; forgotten once the entry is
// acknowledged (individually, cumulatively, or by a reset); persisted in
// the cursor record in position order and validated when read back.
func TestCursorBatchAcks(t *testing.T) {
	v, lc := testView()
	c := &cursorCore{markDelete: Position{10, 0}}
	if !c.setBatch(v, lc, Position{12, 1}, []int64{0b1100}) || !c.setBatch(v, lc, Position{10, 2}, []int64{0b10}) {
		t.Fatal("a partial batch of a stored entry not recorded")
	}
	if c.setBatch(v, lc, Position{10, 0}, []int64{1}) || c.setBatch(v, lc, Position{11, 0}, []int64{1}) || c.setBatch(v, lc, Position{14, 5}, []int64{1}) {
		t.Fatal("a batch state for an acknowledged or unstored entry was recorded")
	}
	if c.setBatch(v, lc, Position{12, 1}, []int64{0b1100}) {
		t.Fatal("the same state twice is a change")
	}
	got := c.batches(10)
	if len(got) != 2 || got[0].Pos != (Position{10, 2}) || got[1].Pos != (Position{12, 1}) {
		t.Fatalf("batches %+v, want 10:2 then 12:1", got)
	}
	rec := cursorRecord{markDelete: c.markDelete, batches: got}
	b, err := encodeCursor(rec, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeCursor("k", b)
	if err != nil || fmt.Sprint(back.batches) != fmt.Sprint(got) {
		t.Fatalf("round trip: %+v (%v), want %+v", back.batches, err, got)
	}
	bad, _ := encodeCursor(cursorRecord{markDelete: Position{12, 1}, batches: got}, time.Unix(1, 0))
	if _, err := decodeCursor("k", bad); err == nil {
		t.Fatal("a record with a batch state at or before mark-delete was accepted")
	}
	c.ack(v, lc, Position{12, 1})
	if _, ok := c.batch[Position{12, 1}]; ok {
		t.Fatal("an acknowledged entry kept its batch state")
	}
	c.ackCumulative(v, lc, Position{10, 2})
	if len(c.batch) != 0 {
		t.Fatalf("a cumulative ack left %v", c.batch)
	}
	c.setBatch(v, lc, Position{14, 0}, []int64{1})
	c.resetTo(v, lc, Earliest)
	if len(c.batch) != 0 {
		t.Fatal("a reset kept batch state")
	}
}
