package up_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
)

// `meridian up`'s engine: two regions as separate processes, the global
// store with its witness, endpoints.json as the contract, restart of one
// killed process, and a clean stop.
func TestUpTwoRegions(t *testing.T) {
	bin := testutil.MeridianBinary(t)
	dir := t.TempDir()
	plan, err := up.NewPlan(up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, DataDir: dir, GossipProfile: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d, err := up.Start(ctx, plan, bin, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			d.Stop(5 * time.Second)
		}
	}()

	var e up.Endpoints
	b, err := os.ReadFile(filepath.Join(dir, "endpoints.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Regions) != 2 || e.ServiceURL == "" || len(e.GlobalStore) != 3 || e.Witness.Pid == 0 {
		t.Fatalf("endpoints.json: %s", b)
	}
	roles := map[string]int{}
	for _, r := range e.Regions {
		for _, p := range r.Processes {
			if p.Pid == 0 || p.Addr == "" {
				t.Fatalf("process without pid/addr: %+v", p)
			}
			roles[p.Role]++
		}
	}
	if roles["bookie"] != 6 || roles["broker"] != 2 || roles["etcd"] != 2 || roles["global-etcd"] != 2 {
		t.Fatalf("roles: %v", roles)
	}

	// Each region serves produce and consume through its own service URL.
	for _, r := range e.Regions {
		client, err := pulsar.NewClient(pulsar.ClientOptions{URL: r.ServiceURL, ConnectionTimeout: 5 * time.Second,
			Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
		if err != nil {
			t.Fatal(err)
		}
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: "up-test-" + r.Name})
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(r.Name)}); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: "up-test-" + r.Name, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Receive(ctx)
		if err != nil || string(m.Payload()) != r.Name {
			t.Fatalf("%s: receive %v", r.Name, err)
		}
		client.Close()
	}

	// The global store is one etcd cluster of three members (two regions
	// and the witness): it keeps working with one region's member gone.
	gs, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: e.GlobalStore, Prefix: "/meridian/global"})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	if _, err := gs.Put(ctx, "/probe", []byte("x")); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(d.Pid("global-east"), syscall.SIGKILL)
	// A write in flight on the dead member's connection fails (etcd does
	// not retry non-idempotent requests); the next ones go to the others.
	testutil.Eventually(t, 30*time.Second, "a global write without one member", func() bool {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		_, err := gs.Put(wctx, "/probe", []byte("y"))
		return err == nil
	})

	// Gossip spans both regions: every broker and bookie is alive in the
	// health view of a broker; a killed bookie turns failed there.
	health := func() map[string]string {
		var h struct {
			Members []struct{ Name, State string }
		}
		resp, err := http.Get(e.Regions[1].AdminURL + "/admin/v2/meridian/health")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&h)
		out := map[string]string{}
		for _, m := range h.Members {
			out[m.Name] = m.State
		}
		return out
	}
	testutil.Eventually(t, 30*time.Second, "8 gossip members alive in the west broker's view", func() bool {
		h := health()
		alive := 0
		for _, st := range h {
			if st == "alive" {
				alive++
			}
		}
		return alive == 8
	})
	victim := "east-bookie-2"
	old := d.Pid(victim)
	syscall.Kill(old, syscall.SIGKILL)
	testutil.Eventually(t, 15*time.Second, "the killed east bookie failed in west's view", func() bool {
		return health()[victim] == "failed"
	})

	// The control endpoint restarts nothing for a caller without the
	// token of DIR/control.token (0600).
	for _, auth := range []string{"", "Bearer wrong"} {
		req, _ := http.NewRequest(http.MethodPost, e.ControlURL+"/restart?name="+victim, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("control endpoint with Authorization %q: HTTP %d, want 401", auth, resp.StatusCode)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "control.token")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("control token file: %v %v", st, err)
	}
	// A killed bookie comes back through the control endpoint, on the same data.
	if err := up.RequestRestart(dir, victim); err != nil {
		t.Fatal(err)
	}
	if d.Pid(victim) == old || d.Pid(victim) == 0 {
		t.Fatal("the bookie was not restarted")
	}
	es, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{e.Regions[0].EtcdURL}, Prefix: "/meridian/regions/east"})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	testutil.Eventually(t, 60*time.Second, "restarted bookie registered", func() bool {
		_, err := es.Get(context.Background(), "/bookies/writable/"+victim)
		return err == nil
	})

	// Stop leaves no process behind.
	var pids []int
	for _, ps := range plan.Procs {
		pids = append(pids, d.Pid(ps.Name))
	}
	d.Stop(10 * time.Second)
	stopped = true
	time.Sleep(200 * time.Millisecond)
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			st, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
			if len(st) > 0 && !containsZombie(string(st)) {
				t.Fatalf("process %d still running after Stop", pid)
			}
		}
	}
}

func containsZombie(stat string) bool {
	for i := 0; i+2 < len(stat); i++ {
		if stat[i] == ')' {
			return len(stat) > i+2 && stat[i+2] == 'Z'
		}
	}
	return false
}
