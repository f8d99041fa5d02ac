package dispatch

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the scripts in testdata/. A harness plays the
// broker's shell: it holds a log of entries and a cursor over it, and
// after every input runs dispatch rounds as the shell's dispatch goroutine
// does (until a round reads nothing new), printing what was sent. Commands:
//
//	new type=exclusive|shared|failover|key_shared [partition=N]
//	add-consumer id=N name=S [priority=P] [type=T] [unready]
//	                      Admit (type: the subscription's), AddConsumer and,
//	                      unless unready, Ready (the SUBSCRIBE's SUCCESS)
//	ready id=N
//	remove-consumer id=N
//	flow id=N permits=P
//	publish [keys=a,b,...]   appends entries, one per key; or input lines
//	                      "[key=K] [n=N] [bad]" (n: messages in a batch;
//	                      bad: undecodable); positions 1:0, 1:1, ...
//	ack [cumulative=L:E] [in-batch] [batch=(i,j)]
//	                      individual acks as input lines "L:E [batch=i,j]"
//	                      (batch: the batch indexes acknowledged now); a
//	                      cumulative ack in-batch names a message of L:E
//	                      (nothing of it acknowledged), with batch those
//	                      indexes of it acknowledged
//	redeliver id=N [pos=(L:E,...)]   negative acks (all held if no pos)
//	trim through=L:E      the log drops entries at or before L:E
//	fail-reads [replay=N] [cursor=N]   the next N reads fail
//	dispatch              runs rounds without a new input (a retry timer)
//	seek to=L:E           Reset, the cursor reset to L:E, every consumer closed
//	owners keys=a,b,...   the Key_Shared ring owner of each key
//	state                 consumers, pending, replay, cursor
//
// Output lines of an input: "active cN" / "inactive cN" (Failover's
// ACTIVE_CONSUMER_CHANGE), then each delivery "L:E [k=K] [n=N] -> cN
// [redelivery=R] [unacked=i,j]". Every delivery is also checked here
// against the rules (a ready consumer with permits; the active one under
// Exclusive and Failover; never before an older entry of the same key —
// any entry for Exclusive and Failover — was first sent; under Key_Shared
// a key's pending entries at one consumer), so a rewrite of the files
// cannot bless a broken answer.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{core: New(Exclusive, -1)}
		h.resetCursor()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type logEntry struct {
	Entry
	trimmed bool
}

type harness struct {
	core *Core
	log  []logEntry
	// the cursor over log
	readPos    Position
	markDelete Position
	acked      map[Position]bool
	avg        float64 // messages per entry, as the topic keeps it
	failReplay int
	failCursor int
	sent       map[Position]bool // sent at least once
	out        []string
}

func (h *harness) resetCursor() {
	h.readPos, h.markDelete = Position{1, 0}, Position{1, -1}
	h.acked = map[Position]bool{}
	if h.sent == nil {
		h.sent = map[Position]bool{}
	}
}

func parsePos(t *testing.T, d *datadriven.TestData, s string) Position {
	l, e, ok := strings.Cut(s, ":")
	li, err1 := strconv.ParseInt(l, 10, 64)
	ei, err2 := strconv.ParseInt(e, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		d.Fatalf(t, "bad position %q", s)
	}
	return Position{li, ei}
}

func parseType(t *testing.T, d *datadriven.TestData, s string) SubType {
	switch s {
	case "exclusive":
		return Exclusive
	case "shared":
		return Shared
	case "failover":
		return Failover
	case "key_shared":
		return KeyShared
	}
	d.Fatalf(t, "unknown type %q", s)
	return 0
}

func (h *harness) id(t *testing.T, d *datadriven.TestData) ID {
	var id uint64
	d.ScanArgs(t, "id", &id)
	return ID(id)
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.out = nil
	switch d.Cmd {
	case "new":
		var typ string
		d.ScanArgs(t, "type", &typ)
		part := -1
		d.MaybeScanArgs(t, "partition", &part)
		h.core = New(parseType(t, d, typ), part)
		h.log, h.avg, h.failReplay, h.failCursor, h.sent = nil, 0, 0, 0, nil
		h.resetCursor()
		return fmt.Sprintf("type=%s partition=%d", h.core.Type(), part)

	case "add-consumer":
		var name string
		var prio int32
		id := h.id(t, d)
		d.ScanArgs(t, "name", &name)
		d.MaybeScanArgs(t, "priority", &prio)
		typ := h.core.Type()
		if a, ok := d.Arg("type"); ok {
			typ = parseType(t, d, a.SingleVal(t))
		}
		if err := h.core.Admit(typ); err != nil {
			return "error: " + err.Error()
		}
		h.core.AddConsumer(ConsumerInfo{ID: id, ConsumerID: uint64(id), Name: name, Priority: prio})
		if !d.HasArg("unready") {
			h.core.Ready(id)
			h.activeChanges()
			h.dispatch(t, d)
		}

	case "ready":
		h.core.Ready(h.id(t, d))
		h.activeChanges()
		h.dispatch(t, d)

	case "remove-consumer":
		if !h.core.RemoveConsumer(h.id(t, d)) {
			return "no such consumer"
		}
		h.activeChanges()
		h.dispatch(t, d)

	case "flow":
		var permits int
		d.ScanArgs(t, "permits", &permits)
		h.core.Flow(h.id(t, d), permits)
		h.activeChanges()
		h.dispatch(t, d)

	case "publish":
		if a, ok := d.Arg("keys"); ok {
			for _, k := range vals(a) {
				h.append(Entry{Key: k, NumMessages: 1})
			}
		}
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line == "" {
				continue
			}
			e := Entry{NumMessages: 1}
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "key":
					e.Key = v
				case "n":
					n, err := strconv.Atoi(v)
					if err != nil {
						d.Fatalf(t, "bad n %q", v)
					}
					e.NumMessages = n
				case "bad":
					e.Undecodable = true
				default:
					d.Fatalf(t, "bad entry field %q", f)
				}
			}
			h.append(e)
		}
		h.dispatch(t, d)

	case "ack":
		if a, ok := d.Arg("cumulative"); ok {
			p := parsePos(t, d, a.SingleVal(t))
			var set []int64
			if d.HasArg("in-batch") {
				set = []int64{-1} // a message inside the batch, none of it acknowledged
			}
			if b, ok := d.Arg("batch"); ok {
				set = h.ackSet(t, d, p, strings.Join(b.Vals, ","))
			}
			p, ok := h.core.AckCumulative(p, set)
			if ok {
				h.ackCumulative(p)
				h.printf("cursor acked through %s", p)
			} else {
				h.printf("cursor not acked (%s)", p)
			}
			h.dispatch(t, d)
			break
		}
		var acks []Ack
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			a := Ack{Pos: parsePos(t, d, f[0])}
			if len(f) > 1 {
				idx, ok := strings.CutPrefix(f[1], "batch=")
				if !ok {
					d.Fatalf(t, "bad ack %q", line)
				}
				a.AckSet = h.ackSet(t, d, a.Pos, idx)
			}
			acks = append(acks, a)
		}
		full := h.core.Ack(acks)
		for _, p := range full {
			h.ack(p)
		}
		if len(full) > 0 {
			h.printf("cursor acked %s", posList(full))
			h.dispatch(t, d)
		} else {
			h.printf("nothing fully acked")
		}

	case "redeliver":
		var ps []Position
		if a, ok := d.Arg("pos"); ok {
			for _, v := range vals(a) {
				ps = append(ps, parsePos(t, d, v))
			}
		}
		h.core.Redeliver(h.id(t, d), ps)
		h.dispatch(t, d)

	case "trim":
		var s string
		d.ScanArgs(t, "through", &s)
		p := parsePos(t, d, s)
		for i := range h.log {
			if !p.Less(h.log[i].Pos) {
				h.log[i].trimmed = true
			}
		}
		return "trimmed through " + p.String()

	case "fail-reads":
		d.MaybeScanArgs(t, "replay", &h.failReplay)
		d.MaybeScanArgs(t, "cursor", &h.failCursor)
		return fmt.Sprintf("replay reads fail: %d, cursor reads fail: %d", h.failReplay, h.failCursor)

	case "dispatch":
		h.dispatch(t, d)

	case "seek":
		var s string
		d.ScanArgs(t, "to", &s)
		p := parsePos(t, d, s)
		h.core.Reset()
		h.markDelete, h.readPos, h.acked = Position{p.Ledger, p.Entry - 1}, p, map[Position]bool{}
		var closed []string
		for _, c := range h.core.Consumers() {
			h.core.RemoveConsumer(c.ID)
			closed = append(closed, fmt.Sprintf("c%d", c.ID))
		}
		h.printf("closed %s", strings.Join(closed, " "))

	case "owners":
		a, ok := d.Arg("keys")
		if !ok {
			d.Fatalf(t, "owners needs keys=")
		}
		for _, k := range vals(a) {
			if id, ok := h.core.KeyOwner(k); ok {
				h.printf("%s -> c%d", k, id)
			} else {
				h.printf("%s -> none", k)
			}
		}

	case "state":
		return h.state()

	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	h.checkKeys(t, d)
	if len(h.out) == 0 {
		return "(nothing)"
	}
	return strings.Join(h.out, "\n")
}

func (h *harness) printf(format string, args ...any) {
	h.out = append(h.out, fmt.Sprintf(format, args...))
}

func (h *harness) append(e Entry) {
	e.Pos = Position{1, int64(len(h.log))}
	h.log = append(h.log, logEntry{Entry: e})
}

func (h *harness) entry(p Position) (Entry, bool) {
	for _, e := range h.log {
		if e.Pos == p && !e.trimmed {
			return e.Entry, true
		}
	}
	return Entry{}, false
}

// ackSet builds a protocol ack_set for entry p: every index of the batch
// still set except those listed (acknowledged now).
func (h *harness) ackSet(t *testing.T, d *datadriven.TestData, p Position, idx string) []int64 {
	n := 64
	if e, ok := h.entry(p); ok {
		n = e.NumMessages
	}
	set := make([]int64, (n+63)/64)
	for i := 0; i < n; i++ {
		set[i/64] |= 1 << uint(i%64)
	}
	for _, s := range strings.Split(idx, ",") {
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 || i >= n {
			d.Fatalf(t, "bad batch index %q", s)
		}
		set[i/64] &^= 1 << uint(i%64)
	}
	return set
}

func (h *harness) isAcked(p Position) bool { return !h.markDelete.Less(p) || h.acked[p] }

func (h *harness) ack(p Position) {
	h.acked[p] = true
	for _, e := range h.log {
		if h.markDelete.Less(e.Pos) {
			if !h.acked[e.Pos] {
				break
			}
			h.markDelete = e.Pos
		}
	}
}

func (h *harness) ackCumulative(p Position) {
	if h.markDelete.Less(p) {
		h.markDelete = p
	}
	h.ack(h.markDelete) // folds acked entries that now continue it
}

// readCursor reads up to n unacknowledged entries from the read position,
// as mledger's Cursor.ReadEntries, and moves the read position past them.
func (h *harness) readCursor(n int) []Entry {
	var out []Entry
	for _, e := range h.log {
		if len(out) == n {
			break
		}
		if e.Pos.Less(h.readPos) || h.isAcked(e.Pos) || e.trimmed {
			continue
		}
		out = append(out, e.Entry)
	}
	if len(out) > 0 {
		last := out[len(out)-1].Pos
		h.readPos = Position{last.Ledger, last.Entry + 1}
	}
	return out
}

func (h *harness) activeChanges() {
	for _, a := range h.core.ActiveChanges() {
		if a.Active {
			h.printf("active c%d", a.Consumer)
		} else {
			h.printf("inactive c%d", a.Consumer)
		}
	}
}

// dispatch runs rounds as the shell's goroutine does: again at once while
// a round read new entries.
func (h *harness) dispatch(t *testing.T, d *datadriven.TestData) {
	for i := 0; ; i++ {
		if i == 1000 {
			d.Fatalf(t, "dispatch does not settle")
		}
		if !h.round(t, d) {
			return
		}
	}
}

// round is the shell's dispatchOnce; it reports whether the round read
// new entries.
func (h *harness) round(t *testing.T, d *datadriven.TestData) bool {
	r := h.core.StartRound()
	if r == nil {
		return false
	}
	for p, ok := r.NextReplay(); ok; p, ok = r.NextReplay() {
		if h.failReplay > 0 {
			h.failReplay--
			h.printf("replay read %s failed", p)
			r.ReplayFailed()
			continue
		}
		e, ok := h.entry(p)
		if !ok {
			h.printf("replay %s gone", p)
			h.core.ReplayGone(p)
			continue
		}
		h.offer(t, d, e, func() (Delivery, Outcome) { return h.core.Replayed(r, e) })
	}
	n := h.core.ToRead(r, h.avg)
	if n == 0 {
		return false
	}
	if h.failCursor > 0 {
		h.failCursor--
		h.printf("cursor read failed")
		return false
	}
	es := h.readCursor(n)
	for _, e := range es {
		h.offer(t, d, e, func() (Delivery, Outcome) { return h.core.Read(r, e) })
	}
	return len(es) > 0
}

func (h *harness) offer(t *testing.T, d *datadriven.TestData, e Entry, step func() (Delivery, Outcome)) {
	before := map[ID]ConsumerState{}
	for _, c := range h.core.Consumers() {
		before[c.ID] = c
	}
	active, hasActive := h.core.Active()
	dl, o := step()
	switch o {
	case Discard:
		h.printf("%s undecodable: discarded", e.Pos)
		h.ack(e.Pos)
		return
	case Hold:
		return
	}
	c, ok := before[dl.Consumer]
	switch {
	case !ok || !c.Ready || c.Permits <= 0:
		d.Fatalf(t, "%s sent to c%d, not a ready consumer with permits: %+v", e.Pos, dl.Consumer, c)
	case (h.core.Type() == Exclusive || h.core.Type() == Failover) && (!hasActive || active != dl.Consumer):
		d.Fatalf(t, "%s sent to c%d, not the active consumer", e.Pos, dl.Consumer)
	case dl.Pos != e.Pos || dl.NumMessages != e.NumMessages:
		d.Fatalf(t, "delivery %+v of entry %+v", dl, e)
	}
	if !h.sent[e.Pos] && h.core.Type() != Shared {
		for _, o := range h.log {
			if !o.Pos.Less(e.Pos) {
				break
			}
			sameKey := h.core.Type() != KeyShared || o.Key == e.Key
			if sameKey && !h.sent[o.Pos] && !o.trimmed && !h.isAcked(o.Pos) {
				d.Fatalf(t, "%s sent before the older %s was ever sent", e.Pos, o.Pos)
			}
		}
	}
	h.sent[e.Pos] = true
	h.avg = Average(h.avg, dl.NumMessages)
	s := e.Pos.String()
	if e.Key != "" {
		s += " k=" + e.Key
	}
	if e.NumMessages != 1 {
		s += fmt.Sprintf(" n=%d", e.NumMessages)
	}
	s += fmt.Sprintf(" -> c%d", dl.Consumer)
	if dl.RedeliveryCount > 0 {
		s += fmt.Sprintf(" redelivery=%d", dl.RedeliveryCount)
	}
	if dl.AckSet != nil {
		var un []string
		for i := 0; i < e.NumMessages; i++ {
			if dl.AckSet[i/64]&(1<<uint(i%64)) != 0 {
				un = append(un, strconv.Itoa(i))
			}
		}
		s += " unacked=" + strings.Join(un, ",")
	}
	h.out = append(h.out, s)
}

// checkKeys: under Key_Shared a key hash's pending entries are all held
// by one consumer, the one drain names.
func (h *harness) checkKeys(t *testing.T, d *datadriven.TestData) {
	if h.core.Type() != KeyShared {
		return
	}
	holder := map[uint32]ID{}
	for pos, pe := range h.core.pending {
		if id, ok := holder[pe.hash]; ok && id != pe.c.ID {
			d.Fatalf(t, "key hash %x pending at c%d and c%d (%s)", pe.hash, id, pe.c.ID, pos)
		}
		holder[pe.hash] = pe.c.ID
		if dr := h.core.drain[pe.hash]; dr == nil || dr.c != pe.c {
			d.Fatalf(t, "%s pending at c%d, not the consumer draining its key", pos, pe.c.ID)
		}
	}
}

// vals splits an argument's values on commas: keys=a,b and keys=(a,b)
// alike.
func vals(a datadriven.CmdArg) []string {
	var out []string
	for _, v := range a.Vals {
		out = append(out, strings.Split(v, ",")...)
	}
	return out
}

func posList(ps []Position) string {
	if len(ps) == 0 {
		return "none"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, " ")
}

func (h *harness) state() string {
	var b strings.Builder
	fmt.Fprintf(&b, "type=%s", h.core.Type())
	if id, ok := h.core.Active(); ok && (h.core.Type() == Exclusive || h.core.Type() == Failover) {
		fmt.Fprintf(&b, " active=c%d", id)
	}
	b.WriteString("\n")
	for _, c := range h.core.Consumers() {
		ready := "ready"
		if !c.Ready {
			ready = "unready"
		}
		fmt.Fprintf(&b, "c%d name=%s priority=%d %s permits=%d\n", c.ID, c.Name, c.Priority, ready, c.Permits)
	}
	keyOf := map[Position]string{}
	for _, e := range h.log {
		keyOf[e.Pos] = e.Key
	}
	var pend []Position
	for p := range h.core.pending {
		pend = append(pend, p)
	}
	sort.Slice(pend, func(i, j int) bool { return pend[i].Less(pend[j]) })
	b.WriteString("pending:")
	if len(pend) == 0 {
		b.WriteString(" none")
	}
	for _, p := range pend {
		fmt.Fprintf(&b, " %s", p)
		if k := keyOf[p]; k != "" {
			fmt.Fprintf(&b, "(%s)", k)
		}
		fmt.Fprintf(&b, "->c%d", h.core.pending[p].c.ID)
	}
	var rep []Position
	for p := range h.core.replay {
		rep = append(rep, p)
	}
	sort.Slice(rep, func(i, j int) bool { return rep[i].Less(rep[j]) })
	fmt.Fprintf(&b, "\nreplay: %s\n", posList(rep))
	var acked []Position
	for p := range h.acked {
		if h.markDelete.Less(p) {
			acked = append(acked, p)
		}
	}
	sort.Slice(acked, func(i, j int) bool { return acked[i].Less(acked[j]) })
	fmt.Fprintf(&b, "cursor: read=%s mark-delete=%s acked=%s", h.readPos, h.markDelete, posList(acked))
	return b.String()
}
