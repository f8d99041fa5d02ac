package georep

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/replicator"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
)

// Issue 33, item 3: replication that proves itself. `meridian admin
// replication verify` compares, for each origin region, what every
// region holds of the origin's entries.

// verifyReport asks region's admin API to verify target (tenant/ns or
// tenant/ns/topic), with nothing left out for settling.
func (d *deployment) verifyReport(region, target string) replication.VerifyReport {
	d.t.Helper()
	var rep replication.VerifyReport
	if err := d.admin(region, "GET", "/admin/v2/meridian/replication/verify/"+target+"?settle=0s", nil, &rep); err != nil {
		d.t.Fatal(err)
	}
	return rep
}

// verifyCLI runs `meridian admin replication verify target` against a
// broker of region and returns its output and exit code.
func (d *deployment) verifyCLI(region, target string) (string, int) {
	d.t.Helper()
	var admin string
	for _, p := range d.region(region).Processes {
		if p.Role == "broker" {
			admin = p.Admin
			break
		}
	}
	out, err := exec.Command(testutil.MeridianBinary(d.t), "admin", "--url", d.httpScheme()+admin, "replication", "verify", target).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatal(err)
	}
	return string(out), code
}

// sendEach sends n messages one at a time (one entry each: the producer
// does not batch) and returns their receipts' ids as ledger:entry.
func sendEach(t *testing.T, p pulsar.Producer, from, n int, region string) []string {
	t.Helper()
	var ids []string
	for i := from; i < from+n; i++ {
		id, err := p.Send(context.Background(), &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i%4), Payload: fmt.Appendf(nil, "k%d/%d/%s", i%4, i, region),
			Properties: map[string]string{"n": fmt.Sprint(i)}, EventTime: time.UnixMilli(int64(1_700_000_000_000 + i))})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		ids = append(ids, fmt.Sprintf("%d:%d", id.LedgerID(), id.EntryID()))
	}
	return ids
}

func unbatched(t *testing.T, c pulsar.Client, topic string) pulsar.Producer {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// The region-pair view of one topic's report: origin → region.
func regionOf(t *testing.T, rep replication.VerifyReport, topic, origin, region string) (through uint64, rv replicator.RegionVerify) {
	t.Helper()
	for _, tv := range rep.Topics {
		if tv.Topic != topic {
			continue
		}
		for _, o := range tv.Origins {
			if o.Origin != origin {
				continue
			}
			for _, r := range o.Regions {
				if r.Region == region {
					return o.Through, r
				}
			}
		}
	}
	t.Fatalf("no comparison of %s's entries of %s in %s: %+v", origin, topic, region, rep)
	return 0, replicator.RegionVerify{}
}

// A clean active-active topic (both regions publish) reports zero with
// every entry compared; a payload altered in west's copy (the test hook
// MERIDIAN_FAULT_ALTER_REPL_PAYLOAD, read once by cmd/meridian) is one
// mismatch, named by its origin message id, and the CLI exits non-zero.
func TestVerifyCleanReportsZeroAndAnAlteredPayloadIsAMismatch(t *testing.T) {
	const clean, altered = "persistent://public/geo/clean", "persistent://public/geo/altered"
	const alteredSeq = 7
	t.Setenv("MERIDIAN_FAULT_ALTER_REPL_PAYLOAD", fmt.Sprintf("%s:%d", altered, alteredSeq))
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/geo", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	east, west := d.client("east"), d.client("west")

	sendEach(t, unbatched(t, east, clean), 0, 30, "east")
	sendEach(t, unbatched(t, west, clean), 30, 20, "west")
	// A batch of 10 messages is one entry: its digest covers each.
	bp, err := east.CreateProducer(pulsar.ProducerOptions{Topic: clean, BatchingMaxMessages: 10, BatchingMaxPublishDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, bp, "east", 10, 3)
	bp.Close()
	// Past one chunk of a region's log (5,000 entries) and several
	// buckets (1,000), the summaries come in pieces that must add up.
	produce(t, unbatched(t, east, clean), "east", 6000, 10)
	ids := sendEach(t, unbatched(t, east, altered), 0, 12, "east")
	d.waitReplicated("east", clean, []string{"west"}, time.Minute)
	d.waitReplicated("west", clean, []string{"east"}, time.Minute)
	d.waitReplicated("east", altered, []string{"west"}, time.Minute)

	start := time.Now()
	rep := d.verifyReport("west", "public/geo/clean")
	t.Logf("verify of %s: %v", clean, time.Since(start))
	if !rep.Clean || rep.Missing+rep.Extra+rep.Mismatched+rep.Trimmed+rep.NotReplicated != 0 || len(rep.Topics) != 1 {
		t.Fatalf("a clean topic: %+v", rep)
	}
	// East's 30 + one batch entry + 6,000, west's 20; each compared in
	// the other region.
	if through, r := regionOf(t, rep, clean, "east", "west"); through != 6031 || r.Compared != through {
		t.Fatalf("east's entries: through %d, %d compared in west", through, r.Compared)
	}
	if through, r := regionOf(t, rep, clean, "west", "east"); through != 20 || r.Compared != 20 {
		t.Fatalf("west's entries: through %d, %d compared in east", through, r.Compared)
	}
	if out, code := d.verifyCLI("east", "public/geo/clean"); code != 0 || !strings.Contains(out, "0 missing, 0 extra, 0 mismatched") || !strings.Contains(out, "; clean") {
		t.Fatalf("meridian admin replication verify of a clean topic: exit %d\n%s", code, out)
	}

	rep = d.verifyReport("east", "public/geo/altered")
	_, r := regionOf(t, rep, altered, "east", "west")
	want := ids[alteredSeq-1]
	if rep.Clean || rep.Mismatched != 1 || len(r.Mismatched) != 1 || r.Mismatched[0].From != alteredSeq || r.Mismatched[0].FirstID != want || r.MissingEntries+r.ExtraEntries != 0 || r.Compared != 12 {
		t.Fatalf("one entry altered in west (seq %d, origin id %s): %+v", alteredSeq, want, r)
	}
	out, code := d.verifyCLI("west", "public/geo")
	if code != 1 || !strings.Contains(out, fmt.Sprintf("mismatched: seq %d..%d (1), origin ids %s..%s", alteredSeq, alteredSeq, want, want)) || !strings.Contains(out, "NOT CLEAN") {
		t.Fatalf("meridian admin replication verify of the namespace: exit %d\n%s", code, out)
	}
	t.Logf("%s", out)
}

// A batch dropped on the wire (MERIDIAN_FAULT_DROP_REPL_BATCHES=1: each
// sender's first batch is lost) is a missing range, with the origin id
// of its entry, for as long as west lacks it; once the sender resends it
// (the next batch shows west the gap, west asks for a resend from it) the
// verification reports zero. The background verifier (every 200 ms here)
// counts it missing, then not.
func TestVerifyDroppedBatchIsMissingUntilResent(t *testing.T) {
	t.Setenv("MERIDIAN_FAULT_DROP_REPL_BATCHES", "1")
	t.Setenv("MERIDIAN_BROKER_REPLICATION_VERIFY_PERIOD", "200ms")
	t.Setenv("MERIDIAN_BROKER_REPLICATION_VERIFY_SETTLE", "1ms")
	const topic = "persistent://public/drop/t"
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	d.createNamespace("public/drop", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	p := unbatched(t, d.client("east"), topic)
	first := sendEach(t, p, 0, 1, "east")

	// The first batch is on the wire (sent, never acknowledged: dropped),
	// and nothing after it shows west a gap: west lacks seq 1 until the
	// sender's ack timeout (30 s) or its next batch.
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := d.replication("east", topic)
		if err == nil && len(st) == 1 && st[0].LocalSeq == 1 && st[0].AckedSeq == 0 && st[0].InflightBatches > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("east's sender never sent its first batch: %+v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep := d.verifyReport("east", "public/drop/t")
	_, r := regionOf(t, rep, topic, "east", "west")
	if rep.Clean || rep.Missing != 1 || len(r.Missing) != 1 || r.Missing[0].From != 1 || r.Missing[0].To != 1 || r.Missing[0].FirstID != first[0] {
		t.Fatalf("the dropped batch (seq 1, origin id %s) is not reported missing in west: %+v", first[0], r)
	}

	t.Logf("seq 1 reported missing in west (origin id %s)", first[0])
	d.waitVerifier(topic, "west", time.Now(), 1)
	resend := time.Now()
	more := sendEach(t, p, 1, 20, "east")
	d.waitReplicated("east", topic, []string{"west"}, time.Minute)
	t.Logf("resent and replicated %v after the next sends began", time.Since(resend))
	d.waitVerifier(topic, "west", time.Now(), 0)
	rep = d.verifyReport("west", "public/drop/t")
	if through, r := regionOf(t, rep, topic, "east", "west"); !rep.Clean || through != uint64(1+len(more)) || r.Compared != through || rep.Missing != 0 {
		t.Fatalf("after the resend: through %d, %+v", through, rep)
	}
}

// waitVerifier waits until east's background verifier, in a run begun
// after since, found want of topic's entries missing in remote, and its
// metric says so.
func (d *deployment) waitVerifier(topic, remote string, since time.Time, want uint64) {
	d.t.Helper()
	var last []replStatus
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, _ := d.replication("east", topic)
		last = st
		if len(st) == 1 && st[0].Remote == remote && st[0].VerifiedAt != nil && st[0].VerifiedAt.After(since) && st[0].VerifyMissing == want && st[0].VerifyMismatched == 0 {
			metric := fmt.Sprintf(`meridian_replication_verify_missing_entries{cluster="east",remote="%s",topic="%s"} %d`, remote, topic, want)
			if m := d.metrics("east"); !strings.Contains(m, metric) {
				d.t.Fatalf("the background verifier found %d missing, its metric does not say %s:\n%s", want, metric, m)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.t.Fatalf("east's background verifier never found %d of %s missing in %s: %+v", want, topic, remote, last)
}

// metrics returns the first broker of region's /metrics.
func (d *deployment) metrics(region string) string {
	d.t.Helper()
	for _, p := range d.region(region).Processes {
		if p.Role != "broker" {
			continue
		}
		resp, err := d.httpClient().Get(d.httpScheme() + p.Admin + "/metrics")
		if err != nil {
			d.t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	d.t.Fatalf("no broker in %s", region)
	return ""
}
