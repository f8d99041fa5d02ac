package broker_test

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// Issue 28, "Health and readiness", on real processes: a broker's and a
// bookie's /healthz, /readyz and /status.html answer with no credentials,
// each goes red for the reason it names — the region's etcd paused, the
// bookies paused below the ack quorum, a bookie decommissioned — and green
// again after; being alive (/healthz) does not depend on the others.
func TestProbesGoRedForTheReasonTheyName(t *testing.T) {
	etcd, url := testutil.StartEtcdProc(t, "east-etcd")
	r := testutil.StartRegionOn(t, "east", url, "r1", "r2")
	metrics := testutil.FreeAddr(t)
	r.AddBookie("east-bookie-3", "r3", "--metrics", metrics)
	r.WaitBookies(3)
	b := r.AddBroker("east-broker-1")
	bk := "http://" + metrics

	for _, base := range []string{b.AdminURL(), bk} {
		testutil.WaitProbe(t, base+"/readyz", 200, "ok", 30*time.Second)
		if code, body := testutil.Probe(base + "/healthz"); code != 200 || body != "ok" {
			t.Fatalf("%s/healthz: %d %q", base, code, body)
		}
	}
	if code, body := testutil.Probe(b.AdminURL() + "/status.html"); code != 200 || body != "OK" {
		t.Fatalf("/status.html: %d %q", code, body)
	}

	// The region's etcd paused: the broker is not ready, and says why.
	etcd.Signal(syscall.SIGSTOP)
	testutil.WaitProbe(t, b.AdminURL()+"/readyz", 503, "not ready: metadata-store", 15*time.Second)
	if code, _ := testutil.Probe(b.AdminURL() + "/healthz"); code != 200 {
		t.Fatalf("etcd paused: the broker's /healthz answered %d, want 200", code)
	}
	etcd.Signal(syscall.SIGCONT)
	testutil.WaitProbe(t, b.AdminURL()+"/readyz", 200, "ok", 60*time.Second)

	// Two of three bookies paused: their registrations expire and one
	// writable bookie is below the ack quorum (2).
	r.Bookie("east-bookie-1").Signal(syscall.SIGSTOP)
	r.Bookie("east-bookie-2").Signal(syscall.SIGSTOP)
	testutil.WaitProbe(t, b.AdminURL()+"/readyz", 503, "not ready: bookies", 3*cluster.DefaultRegistrationTTL)
	r.Bookie("east-bookie-1").Signal(syscall.SIGCONT)
	r.Bookie("east-bookie-2").Signal(syscall.SIGCONT)
	testutil.WaitProbe(t, b.AdminURL()+"/readyz", 200, "ok", 60*time.Second)

	// A bookie being decommissioned takes no new writes: not ready.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cluster.StartDecommission(ctx, r.Store, "east-bookie-3", 0); err != nil {
		t.Fatal(err)
	}
	testutil.WaitProbe(t, bk+"/readyz", 503, "not ready: writable", 15*time.Second)
	if code, _ := testutil.Probe(bk + "/healthz"); code != 200 {
		t.Fatalf("decommissioning: the bookie's /healthz answered %d, want 200", code)
	}
	if err := cluster.CancelDecommission(ctx, r.Store, "east-bookie-3"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitProbe(t, bk+"/readyz", 200, "ok", 15*time.Second)
}

// The standalone (whose broker has no separate bookie source) is ready
// once it serves, and `meridian health` — a container's HEALTHCHECK —
// exits 0 on each endpoint, and 1 with the endpoint's answer on a path
// that is not one.
func TestStandaloneAnswersMeridianHealth(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir())
	testutil.WaitProbe(t, s.AdminURL+"/readyz", 200, "ok", 30*time.Second)
	for _, check := range []string{"readyz", "healthz", "status.html"} {
		out, err := exec.Command(testutil.MeridianBinary(t), "health", "--url", s.AdminURL, "--check", check).CombinedOutput()
		if err != nil {
			t.Fatalf("meridian health --check %s: %v\n%s", check, err, out)
		}
	}
	out, err := exec.Command(testutil.MeridianBinary(t), "health", "--url", s.AdminURL+"/nothing").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "404") {
		t.Fatalf("meridian health on a wrong path: err %v, output %s", err, out)
	}
}

// Issue 28 §2, "On SIGTERM a broker reports not-ready first, then hands
// its bundles over": with --shutdown-drain-delay 3s a broker sent SIGTERM
// answers /readyz 503 "stopping" at once and still serves its topics (a
// producer's send is acknowledged after the 503 was seen), then stops.
func TestSIGTERMReportsNotReadyBeforeItStopsServing(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	b := r.AddBroker("east-broker-1", "--shutdown-drain-delay", "3s")
	testutil.WaitProbe(t, b.AdminURL()+"/readyz", 200, "ok", 30*time.Second)
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL(), OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topicName(t), DisableBatching: true, SendTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m")})
		return err
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	b.Signal(syscall.SIGTERM)
	testutil.WaitProbe(t, b.AdminURL()+"/readyz", 503, "not ready: stopping", 2*time.Second)
	notReady := time.Since(start)
	if err := send(); err != nil {
		t.Fatalf("a send after /readyz went 503 (%s after SIGTERM): %v, want it served during the drain delay", notReady, err)
	}
	if d := time.Since(start); d >= 3*time.Second {
		t.Fatalf("the send after the 503 was acknowledged %s after SIGTERM: not within the 3s drain delay", d)
	}
	if exited, _ := b.Exited(); exited {
		t.Fatal("the broker exited before its drain delay ended")
	}
	if !b.Wait(40 * time.Second) {
		t.Fatal("the broker did not stop after its drain delay")
	}
	if d := time.Since(start); d < 3*time.Second {
		t.Fatalf("the broker stopped %s after SIGTERM, before its 3s drain delay", d)
	}
}
