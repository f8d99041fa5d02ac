package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/internal/procstop"
	"github.com/meridian-mq/meridian/tools/up"
)

// The 2-region deployment the georep bench runs on: its processes, CPU,
// admin calls, the sync-mode probe and the backfill of a new region.

// geoDeployment is the running 2-region deployment and what the bench
// needs of it.
type geoDeployment struct {
	d          *up.Deployment
	east, west up.RegionEndpoint
}

// pids lists the deployment's processes' pids (role "" = all).
func (g *geoDeployment) pids(region, role string) []int {
	var out []int
	for _, ps := range g.d.Plan.Procs {
		if (region == "" || ps.Region == region) && (role == "" || ps.Role == role) {
			if pid := g.d.Pid(ps.Name); pid > 0 {
				out = append(out, pid)
			}
		}
	}
	return out
}

// cpu is the user+system CPU time so far of every process of the
// deployment.
func (g *geoDeployment) cpu() time.Duration {
	var sum time.Duration
	for _, pid := range g.pids("", "") {
		c, _ := pidCPU(pid)
		sum += c
	}
	return sum
}

// pidCPU reads a process's user+system CPU time from /proc/PID/stat.
func pidCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bench: unparsable /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("bench: short /proc stat")
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// settle waits until the deployment and this process together use under
// 30 % of a core over 300 ms (idle gossip and etcd cost ~10 % here), at
// most 6 s.
func (g *geoDeployment) settle(ctx context.Context) (time.Duration, float64, bool) {
	const window = 300 * time.Millisecond
	start := time.Now()
	var share float64
	for time.Since(start) < 6*time.Second && ctx.Err() == nil {
		c0 := g.cpu() + selfCPU()
		time.Sleep(window)
		d := g.cpu() + selfCPU() - c0
		share = d.Seconds() / window.Seconds()
		if share < 0.3 {
			return time.Since(start), share, true
		}
	}
	return time.Since(start), share, false
}

// admin calls east's (or west's) admin API.
func adminCall(ctx context.Context, base, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

// createNamespace creates tenant/ns over east's admin API, keeping data
// forever (retention -1). repl nil: no Meridian replication policy.
func (g *geoDeployment) createNamespace(ctx context.Context, ns string, regions []string, repl map[string]any) error {
	body := map[string]any{
		"replication_clusters": regions,
		"retention_policies":   map[string]int{"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
	}
	if repl != nil {
		body["meridian_replication"] = repl
	}
	return adminCall(ctx, g.east.AdminURL, "PUT", "/admin/v2/namespaces/"+ns, body, nil)
}

// backlog returns east's replication backlog (entries) of topic towards
// west, -1 if unknown.
func (g *geoDeployment) backlog(ctx context.Context, topic string) int64 {
	var st []struct {
		Topic          string `json:"topic"`
		Remote         string `json:"remote"`
		BacklogEntries int64  `json:"backlogEntries"`
	}
	if err := adminCall(ctx, g.east.AdminURL, "GET", "/admin/v2/meridian/replication?filter="+url.QueryEscape(topic), nil, &st); err != nil {
		return -1
	}
	var n int64 = -1
	for _, s := range st {
		if s.Remote == g.west.Name {
			n = max(n, 0) + s.BacklogEntries
		}
	}
	return n
}

// probeHeld tells whether a mode holds a producer's receipt until west has
// the entry: it sends one message into topic (after a warm-up send), stops
// west's broker (sync; stretched: west's bookies) with SIGSTOP for 2 s and
// watches whether the receipt comes back meanwhile.
func (g *geoDeployment) probeHeld(ctx context.Context, mode, topic string, size int) (bool, string, error) {
	c, err := newPulsarClient(g.east.ServiceURL)
	if err != nil {
		return false, "", err
	}
	defer c.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 60 * time.Second})
	if err != nil {
		return false, "producer refused: " + err.Error(), nil
	}
	defer p.Close()
	payload := make([]byte, size)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = p.Send(sctx, &pulsar.ProducerMessage{Payload: payload})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return false, "", ctx.Err()
		}
		return false, "warm-up send failed: " + err.Error(), nil
	}
	role, what := "broker", "west's broker"
	if mode == "stretched" {
		role, what = "bookie", "west's bookies"
	}
	pids := g.pids("west", role)
	if len(pids) == 0 {
		return false, "", errors.New("bench: no west process to stop")
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	stopped := true
	resume := func() {
		if stopped {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
			stopped = false
		}
	}
	defer resume()
	for _, pid := range pids {
		// The stop takes effect a moment after kill returns: a receipt
		// in that moment is not a mode's fault.
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := procstop.Wait(c, pid)
		cancel()
		if err != nil {
			return false, "", err
		}
	}
	type receipt struct {
		at  time.Time
		err error
	}
	got := make(chan receipt, 1)
	start := time.Now()
	p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
		got <- receipt{time.Now(), err}
	})
	// (No Flush: it would block until the receipt; unbatched, SendAsync
	// writes at once.)
	select {
	case r := <-got:
		resume()
		if r.err != nil {
			return false, fmt.Sprintf("the send failed %v after it was made while %s was stopped: %v", r.at.Sub(start).Round(time.Millisecond), what, r.err), nil
		}
		return false, fmt.Sprintf("not honoured yet: the receipt came back %v after the send while %s was stopped (SIGSTOP), so it did not wait for west", r.at.Sub(start).Round(time.Millisecond), what), nil
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return false, "", ctx.Err()
	}
	resume()
	t1 := time.Now()
	select {
	case r := <-got:
		if r.err != nil {
			return true, fmt.Sprintf("held: no receipt while %s was stopped for 2 s; after SIGCONT the send failed (%v)", what, r.err), nil
		}
		return true, fmt.Sprintf("held: no receipt while %s was stopped for 2 s; it came %v after SIGCONT", what, time.Since(t1).Round(time.Millisecond)), nil
	case <-time.After(60 * time.Second):
		return false, fmt.Sprintf("no receipt while %s was stopped, nor within 60 s after it resumed", what), nil
	case <-ctx.Done():
		return false, "", ctx.Err()
	}
}

// backfill measures how fast a newly added region catches up: namespace
// public/bench-backfill lists only east while n batched 1 KiB messages are
// produced into one topic; then west is added to its regions, and a
// consumer in west (Earliest) receives them. The time runs from the
// policy change to the last arrival.
func (g *geoDeployment) backfill(ctx context.Context, o GeorepOptions, n int) backfillResult {
	res := backfillResult{N: n}
	ns := "public/bench-backfill"
	if err := g.createNamespace(ctx, ns, []string{"east"}, nil); err != nil {
		res.Err = fmt.Errorf("namespace: %w", err)
		return res
	}
	topic := fmt.Sprintf("persistent://%s/bf-%s", ns, time.Now().Format("150405"))
	c, err := newPulsarClient(g.east.ServiceURL)
	if err != nil {
		res.Err = err
		return res
	}
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: batchDelay, MaxPendingMessages: o.MaxPending, SendTimeout: 30 * time.Second})
	if err != nil {
		c.Close()
		res.Err = fmt.Errorf("producer: %w", err)
		return res
	}
	payload := make([]byte, o.Size)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < n && ctx.Err() == nil; i++ {
		wg.Add(1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
	}
	wg.Wait()
	p.Close()
	c.Close()
	if f := failed.Load(); f > 0 {
		res.Err = fmt.Errorf("%d of %d sends failed before the backfill", f, n)
		return res
	}
	g.settle(ctx)
	start := time.Now()
	if err := adminCall(ctx, g.east.AdminURL, "POST", "/admin/v2/namespaces/"+ns+"/replication", []string{"east", "west"}, nil); err != nil {
		res.Err = fmt.Errorf("add west: %w", err)
		return res
	}
	var cons *consumers
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cons, err = subscribe(g.west.ServiceURL, consumeSpec{Topics: []string{topic}, Sub: "backfill", Earliest: true})
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		res.Err = fmt.Errorf("consumer in west: %w", err)
		return res
	}
	defer cons.unsubscribe()
	var want atomic.Int64
	want.Store(int64(n))
	r := cons.receive(ctx, consumeSpec{Stall: 20 * time.Second, Duration: 3 * time.Minute}, start, &want)
	if r.Ops < n {
		res.Err = fmt.Errorf("west received %d of %d messages (stalled 20 s)", r.Ops, n)
		return res
	}
	res.Time = r.Elapsed
	return res
}
