package mledger_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

const crashML = "public/default/persistent/crash"

// ownerMain is a broker-like process: it owns crashML, appends forever and
// acknowledges through a durable cursor, leaving holes (every fourth
// entry). It prints, each line flushed:
//
//	APPEND i ledger entry    after append i was confirmed
//	ACKED ledger entry       before acknowledging the entry
//	FLUSHED ledger entry     after Cursor.Flush returned: the mark-delete
//	RANGE l1 e1 l2 e2        ... and the acked ranges it persisted
//	END                      end of one flushed state
//
// The cursor's timed persistence is off (1h): only explicit flushes write.
func ownerMain() int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	s, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{os.Getenv("MLEDGER_TEST_ETCD")}, Prefix: os.Getenv("MLEDGER_TEST_PREFIX")})
	if err != nil {
		return fail(err)
	}
	view, err := cluster.WatchBookies(ctx, s)
	if err != nil {
		return fail(err)
	}
	lc, err := ledger.New(ledger.Config{Store: s, Bookies: ledger.ViewSource{View: view}})
	if err != nil {
		return fail(err)
	}
	ml, err := mledger.Open(ctx, crashML, mledger.Config{Store: s, Ledgers: lc, MaxEntriesPerLedger: 50, CursorPersistInterval: time.Hour})
	if err != nil {
		return fail(err)
	}
	c, err := ml.OpenCursor(ctx, "sub", mledger.Earliest)
	if err != nil {
		return fail(err)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	println := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		mu.Unlock()
	}
	go func() {
		sem := make(chan struct{}, 16)
		for i := 0; ; i++ {
			sem <- struct{}{}
			ml.AppendAsync(payload(i), func(p mledger.Position, err error) {
				if err == nil {
					println("APPEND %d %d %d", i, p.Ledger, p.Entry)
				}
				<-sem
			})
		}
	}()
	acked := 0
	seen := ml.LastConfirmed()
	for {
		wake := ml.Notify(seen)
		es, err := c.ReadEntries(ctx, 20, 0)
		if err != nil {
			return fail(err)
		}
		if len(es) == 0 {
			<-wake
			continue
		}
		seen = es[len(es)-1].Pos
		for _, e := range es {
			var i int
			fmt.Sscanf(string(e.Data), "message %d", &i)
			if i%4 == 3 {
				continue
			}
			println("ACKED %d %d", e.Pos.Ledger, e.Pos.Entry)
			c.Ack(e.Pos)
			acked++
		}
		if acked >= 25 {
			acked = 0
			if err := c.Flush(ctx); err != nil {
				return fail(err)
			}
			var sb strings.Builder
			md := c.MarkDeleted()
			fmt.Fprintf(&sb, "FLUSHED %d %d\n", md.Ledger, md.Entry)
			for _, r := range c.AckedRanges() {
				fmt.Fprintf(&sb, "RANGE %d %d %d %d\n", r.From.Ledger, r.From.Entry, r.To.Ledger, r.To.Entry)
			}
			sb.WriteString("END")
			println("%s", sb.String())
		}
	}
}

// A broker process holding a managed ledger is killed with SIGKILL while
// appending and acknowledging. The next owner finds every entry the dead
// one had confirmed, and the cursor exactly as last flushed: every
// acknowledgement persisted by Flush is there, nothing is acknowledged
// that the dead owner had not acknowledged, and the acks after the last
// flush are gone (their entries are redelivered).
func TestCrashKeepsFlushedAcks(t *testing.T) {
	r := startRegion(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "MLEDGER_TEST_OWNER=1", "MLEDGER_TEST_ETCD="+r.EtcdURL, "MLEDGER_TEST_PREFIX="+testutil.RegionPrefix("east"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	var mu sync.Mutex
	appended := map[int]mledger.Position{}
	ackedByOwner := map[mledger.Position]bool{}
	type flushed struct {
		md     mledger.Position
		ranges []mledger.Range
	}
	var last *flushed
	flushes := 0
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		var cur *flushed
		for sc.Scan() {
			var a, b, c, d int64
			line := sc.Text()
			mu.Lock()
			switch {
			case strings.HasPrefix(line, "APPEND"):
				fmt.Sscanf(line, "APPEND %d %d %d", &a, &b, &c)
				appended[int(a)] = mledger.Position{Ledger: b, Entry: c}
			case strings.HasPrefix(line, "ACKED"):
				fmt.Sscanf(line, "ACKED %d %d", &a, &b)
				ackedByOwner[mledger.Position{Ledger: a, Entry: b}] = true
			case strings.HasPrefix(line, "FLUSHED"):
				fmt.Sscanf(line, "FLUSHED %d %d", &a, &b)
				cur = &flushed{md: mledger.Position{Ledger: a, Entry: b}}
			case strings.HasPrefix(line, "RANGE"):
				fmt.Sscanf(line, "RANGE %d %d %d %d", &a, &b, &c, &d)
				cur.ranges = append(cur.ranges, mledger.Range{From: mledger.Position{Ledger: a, Entry: b}, To: mledger.Position{Ledger: c, Entry: d}})
			case line == "END":
				last, cur = cur, nil
				flushes++
			}
			mu.Unlock()
		}
	}()
	testutil.Eventually(t, time.Minute, "400 appends and 4 flushes by the owner process", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(appended) >= 400 && flushes >= 4
	})
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	<-readDone
	if t.Failed() {
		t.Log(stderr.String())
	}

	ctx := ctxT(t, 2*time.Minute)
	ml := openML(t, r.Store, newLedgerClient(t, r.Store), crashML, func(c *mledger.Config) { c.MaxEntriesPerLedger = 50 })
	defer ml.Close(ctx)
	all := readAll(t, ml, mledger.Earliest, 100)
	at := map[mledger.Position]string{}
	for _, e := range all {
		at[e.Pos] = string(e.Data)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, p := range appended {
		if at[p] != string(payload(i)) {
			t.Fatalf("append %d confirmed at %s by the dead owner: the new owner has %q", i, p, at[p])
		}
	}
	t.Logf("dead owner: %d appends confirmed, %d flushes; the log holds %d entries; last flushed mark-delete %s with %d ranges",
		len(appended), flushes, len(all), last.md, len(last.ranges))

	c, err := ml.OpenCursor(ctx, "sub", mledger.Latest)
	if err != nil {
		t.Fatal(err)
	}
	if c.MarkDeleted().Less(last.md) {
		t.Fatalf("mark-delete %s is before the last flushed one %s", c.MarkDeleted(), last.md)
	}
	lostAcks := 0
	for _, e := range all {
		inFlushed := !last.md.Less(e.Pos)
		for _, rg := range last.ranges {
			if !e.Pos.Less(rg.From) && !rg.To.Less(e.Pos) {
				inFlushed = true
			}
		}
		acked := c.IsAcked(e.Pos)
		if inFlushed && !acked {
			t.Fatalf("%s was acknowledged and flushed, but is not acknowledged after the crash", e.Pos)
		}
		if acked && !ackedByOwner[e.Pos] {
			t.Fatalf("%s is acknowledged after the crash but the owner never acknowledged it", e.Pos)
		}
		if ackedByOwner[e.Pos] && !acked {
			lostAcks++ // after the last flush: redelivered
		}
	}
	t.Logf("%d acknowledgements after the last flush were lost and will be redelivered; backlog %d", lostAcks, c.Backlog())
	// The new owner serves: appends land after everything the dead one
	// confirmed.
	if _, err := ml.Append(ctx, []byte("new owner")); err != nil {
		t.Fatal(err)
	}
}
