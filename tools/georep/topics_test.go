package georep

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/up"
)

// Issue 4, test 6: topic creation, deletion and a partition-count change
// made in east are visible in west within seconds; a producer created in
// west right after the creation in east does not get TopicNotFound.
func TestTopicMetadataPropagates(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3})
	// up made public/default's policy deterministic: every region, the
	// first one primary — seen the same from both regions.
	for _, r := range []string{"east", "west"} {
		var pol struct {
			Regions []string
			Primary string
		}
		if err := d.admin(r, "GET", "/admin/v2/namespaces/public/default/meridian-replication", nil, &pol); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pol.Regions, []string{"east", "west"}) || pol.Primary != "east" {
			t.Fatalf("%s: public/default replication %+v, want regions [east west], primary east", r, pol)
		}
	}

	const ns = "public/topics"
	d.createNamespace(ns, []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})

	const topic = "persistent://" + ns + "/pt"
	partPath := "/admin/v2/persistent/" + ns + "/pt/partitions"
	partitionsIn := func(region string) (int, error) {
		var out struct{ Partitions int }
		err := d.admin(region, "GET", partPath, nil, &out)
		return out.Partitions, err
	}

	// Create with 4 partitions in east, then at once a producer in west.
	if err := d.admin("east", "PUT", partPath, 4, nil); err != nil {
		t.Fatal(err)
	}
	var next atomic.Int64
	roundRobin := func(_ *pulsar.ProducerMessage, m pulsar.TopicMetadata) int {
		return int(next.Add(1)-1) % int(m.NumPartitions())
	}
	west := d.client("west")
	p, err := west.CreateProducer(pulsar.ProducerOptions{Topic: topic, MessageRouter: roundRobin, DisableBatching: true})
	if err != nil {
		t.Fatalf("producer in west right after creation in east: %v", err)
	}
	defer p.Close()
	seen := map[int32]bool{}
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)})
		cancel()
		if err != nil {
			t.Fatalf("send %d in west: %v", i, err)
		}
		seen[id.PartitionIdx()] = true
	}
	if len(seen) != 4 {
		t.Fatalf("4 sends reached partitions %v, want all of 0..3", seen)
	}
	if n, err := partitionsIn("west"); err != nil || n != 4 {
		t.Fatalf("west reports %d partitions (err %v), want 4", n, err)
	}

	// Grow to 6 partitions in east; west sees 6 within 10 s.
	if err := d.admin("east", "POST", partPath, 6, nil); err != nil {
		t.Fatalf("update the partition count in east: %v", err)
	}
	waitFor(t, 10*time.Second, "west reports 6 partitions", func() (bool, string) {
		n, err := partitionsIn("west")
		return err == nil && n == 6, fmt.Sprintf("partitions %d, err %v", n, err)
	})
	// A new partition is usable in west at once.
	p5, err := west.CreateProducer(pulsar.ProducerOptions{Topic: topic + "-partition-5", DisableBatching: true})
	if err != nil {
		t.Fatalf("producer on the new partition 5 in west: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err = p5.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("p5")})
	cancel()
	p5.Close()
	if err != nil {
		t.Fatalf("send to partition 5 in west: %v", err)
	}

	// A non-partitioned topic created in east is listed in west within
	// 10 s, and gone from west's list within 10 s of its deletion in east.
	const np = "persistent://" + ns + "/np"
	npPath := "/admin/v2/persistent/" + ns + "/np"
	listed := func(region string) (bool, string, error) {
		var topics []string
		err := d.admin(region, "GET", "/admin/v2/persistent/"+ns, nil, &topics)
		return slices.Contains(topics, np), fmt.Sprintf("topics %v, err %v", topics, err), err
	}
	if err := d.admin("east", "PUT", npPath, nil, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "west lists "+np, func() (bool, string) {
		ok, s, err := listed("west")
		return err == nil && ok, s
	})
	if err := d.admin("east", "DELETE", npPath+"?force=true", nil, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "west no longer lists "+np, func() (bool, string) {
		ok, s, err := listed("west")
		return err == nil && !ok, s
	})
}

// waitFor polls check until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, s := check()
		if ok {
			return
		}
		last = s
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %s)", what, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
