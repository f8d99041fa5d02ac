package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

func adminCall(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

type subStats struct {
	Subscriptions map[string]struct {
		MsgBacklog int64 `json:"msgBacklog"`
	} `json:"subscriptions"`
}

func backlog(t *testing.T, admin, topic, sub string) int64 {
	t.Helper()
	code, b := adminCall(t, "GET", admin+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", nil)
	if code != 200 {
		t.Fatalf("stats: %d %s", code, b)
	}
	var st subStats
	json.Unmarshal(b, &st)
	return st.Subscriptions[sub].MsgBacklog
}

// Namespace policies users expect: message TTL, and backlog quotas with
// Pulsar's actions — a consumer that falls far behind must not fill the
// region's disks.
func TestNamespacePolicies(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--policy-check-interval", "300ms")
	client := newPulsarClient(t, s.URL)
	mkns := func(ns string) {
		if code, b := adminCall(t, "PUT", s.AdminURL+"/admin/v2/namespaces/public/"+ns, map[string]any{}); code/100 != 2 {
			t.Fatalf("create namespace: %d %s", code, b)
		}
	}
	fill := func(topic string, n int) {
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		payload := bytes.Repeat([]byte("x"), 1024)
		ctx := context.Background()
		for i := 0; i < n; i++ {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: payload}); err != nil {
				t.Fatal(err)
			}
		}
	}
	subscribe := func(topic, sub string) {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub})
		if err != nil {
			t.Fatal(err)
		}
		c.Close() // the subscription stays, with nobody consuming
	}

	t.Run("ttl", func(t *testing.T) {
		mkns("ttl")
		if code, b := adminCall(t, "POST", s.AdminURL+"/admin/v2/namespaces/public/ttl/messageTTL", 1); code/100 != 2 {
			t.Fatalf("set ttl: %d %s", code, b)
		}
		topic := "persistent://public/ttl/t"
		subscribe(topic, "idle")
		fill(topic, 20)
		if n := backlog(t, s.AdminURL, topic, "idle"); n != 20 {
			t.Fatalf("backlog before expiry: %d", n)
		}
		testutil.Eventually(t, 15*time.Second, "messages older than the TTL expired", func() bool {
			return backlog(t, s.AdminURL, topic, "idle") == 0
		})
	})

	t.Run("consumer-backlog-eviction", func(t *testing.T) {
		mkns("evict")
		if code, b := adminCall(t, "POST", s.AdminURL+"/admin/v2/namespaces/public/evict/backlogQuota",
			map[string]any{"limit": 50 << 10, "policy": "consumer_backlog_eviction"}); code/100 != 2 {
			t.Fatalf("set quota: %d %s", code, b)
		}
		topic := "persistent://public/evict/t"
		subscribe(topic, "slow")
		fill(topic, 300) // ~300 KiB, six times the quota
		testutil.Eventually(t, 15*time.Second, "backlog evicted down to the quota", func() bool {
			n := backlog(t, s.AdminURL, topic, "slow")
			return n > 0 && n*1024 <= 60<<10
		})
	})

	t.Run("producer-exception", func(t *testing.T) {
		mkns("except")
		topic := "persistent://public/except/t"
		subscribe(topic, "slow")
		fill(topic, 100)
		if code, b := adminCall(t, "POST", s.AdminURL+"/admin/v2/namespaces/public/except/backlogQuota",
			map[string]any{"limit": 20 << 10, "policy": "producer_exception"}); code/100 != 2 {
			t.Fatalf("set quota: %d %s", code, b)
		}
		testutil.Eventually(t, 15*time.Second, "producers refused over quota", func() bool {
			p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
			if err != nil {
				return strings.Contains(err.Error(), "ProducerBlockedQuotaExceededException")
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("more")})
			return err != nil
		})
		// The backlog stayed (nothing was evicted) and is readable.
		if n := backlog(t, s.AdminURL, topic, "slow"); n < 100 {
			t.Fatalf("backlog %d: producer_exception must not drop data", n)
		}
	})
}
