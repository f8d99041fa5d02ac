package georep

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (d *deployment) httpScheme() string {
	if d.tls {
		return "https://"
	}
	return "http://"
}

// httpClient trusts the deployment's CA and presents its client
// certificate (TLS deployments); http.DefaultClient otherwise.
func (d *deployment) httpClient() *http.Client {
	if !d.tls {
		return http.DefaultClient
	}
	src, err := tlsutil.NewSource(up.ClientFiles(d.dir))
	if err != nil {
		d.t.Fatal(err)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: src.ClientConfig("")}}
}

// clientOptions adds TLS to a client's options on a TLS deployment: the
// CA, hostname verification on (the Go client checks every broker
// against the first host of the service URL).
func (d *deployment) clientOptions(o pulsar.ClientOptions) pulsar.ClientOptions {
	if d.tls {
		o.TLSTrustCertsFilePath = d.e.TLSTrustCertsFile
		o.TLSValidateHostname = true
	}
	return o
}

// Security issue test 2b: a region-outage failover over pulsar+ssl://
// with hostname verification on. A producer and a consumer with the
// multi-region pulsar+ssl:// URL run on an active-standby namespace; every
// process of east, the active region, is kill -9ed; both carry on in west
// — whose brokers' certificates the client verifies for the URL's first
// host — and every message receipted after the kill is received.
func TestFailoverOverTLS(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL, TLS: true})
	if !strings.HasPrefix(d.e.ServiceURL, "pulsar+ssl://") || d.e.TLSTrustCertsFile == "" {
		t.Fatalf("endpoints of a TLS deployment: %+v", d.e)
	}
	d.createNamespace("public/tls", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	const topic = "persistent://public/tls/payments"
	client, err := pulsar.NewClient(d.clientOptions(pulsar.ClientOptions{URL: d.e.ServiceURL, ConnectionTimeout: 2 * time.Second,
		KeepAliveInterval: time.Second, OperationTimeout: 5 * time.Second, Logger: quietLogger()}))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 60 * time.Second, BatchingMaxPublishDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "dr", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	l := startLoad(p, c, 10*time.Millisecond, fixedPhase("x"), func(m pulsar.Message) { c.Ack(m) })
	tl := l.tl
	mu := &tl.mu
	sent, receipts, received := tl.sentAt, tl.receiptAt, tl.received
	time.Sleep(3 * time.Second)
	mu.Lock()
	before := len(receipts)
	mu.Unlock()
	if before == 0 {
		t.Fatal("nothing receipted over TLS before the outage")
	}
	// Issue 29: Clusters().Get over https answers the regions' TLS URLs.
	checkClusters(t, d, "east")
	killed := time.Now()
	d.killRegion("east")
	dead := killed.Add(100 * time.Millisecond)
	after := func() (r, g int) {
		for i, at := range sent {
			if at.After(dead) {
				if _, ok := receipts[i]; ok {
					r++
					if received[i] {
						g++
					}
				}
			}
		}
		return
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		r, g := after()
		mu.Unlock()
		if r >= 200 && g >= 200 {
			break
		}
	}
	mu.Lock()
	r, _ := after()
	mu.Unlock()
	t.Logf("first %v after the kill: %d receipted", time.Since(killed).Round(time.Millisecond), r)
	l.stop()
	// The receipts still on the way land first (their callbacks run before
	// Flush returns): one landing after the drain below saw nothing missing
	// would read as a message never received (issue 32).
	fctx, fcancel := context.WithTimeout(context.Background(), 90*time.Second)
	if err := p.FlushWithCtx(fctx); err != nil {
		t.Logf("flush: %v", err)
	}
	fcancel()
	// Every message sent after east died and receipted (by west) arrives.
	for drain := time.Now().Add(30 * time.Second); time.Now().Before(drain); time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		if m, err := c.Receive(ctx); err == nil {
			c.Ack(m)
			_, i, _ := parsePayload(m.Payload())
			tl.receive(i)
		}
		cancel()
		mu.Lock()
		rr, gg := after()
		mu.Unlock()
		if gg >= rr {
			break
		}
	}
	mu.Lock()
	rr, gg := after()
	mu.Unlock()
	if rr < 200 {
		t.Fatalf("only %d messages sent after the outage were receipted over TLS", rr)
	}
	if gg < rr {
		t.Fatalf("%d of the %d messages receipted after the outage were received", gg, rr)
	}
	var recs []failoverRecord
	if err := d.admin("west", "GET", "/admin/v2/meridian/failover/public/tls", nil, &recs); err != nil || len(recs) != 1 || recs[0].Active != "west" {
		t.Fatalf("west's failover record: %+v %v", recs, err)
	}
}

// Security issue test 3: replication across two regions over mutual TLS
// works; a process with a certificate from another CA can open neither a
// replication stream nor a bookie add stream; a certificate from the
// deployment's CA that does not speak for the stream's source region is
// refused too, and so is one of that region with another role (a
// bookie's: the roles of up's certificates, meridian://role/ROLE); a
// bookie adds entries only for a broker's certificate, not for the
// deployment's client certificate nor another bookie's (both may still
// ask it for its disk usage).
func TestReplicationOverMutualTLS(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, TLS: true})
	d.createNamespace("public/mtls", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-active"})
	const topic = "persistent://public/mtls/orders"
	west := d.client("west")
	c, err := west.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "w", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	east := d.client("east")
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 20 {
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "k/%d/east", i)}); err != nil {
			t.Fatal(err)
		}
	}
	got := consumeAll(t, c, 20, time.Minute, 5*time.Second)
	if len(got.ids) < 20 {
		t.Fatalf("west received %d of 20 replicated messages", len(got.ids))
	}

	var westRepl, westBookie string
	for _, pe := range d.region("west").Processes {
		switch {
		case pe.Role == "broker" && westRepl == "":
			westRepl = pe.Replication
		case pe.Role == "bookie" && westBookie == "":
			westBookie = pe.Addr
		}
	}
	// Another CA, whose certificate even claims region east and trusts
	// the deployment's CA (so only the server's check stands in the way).
	odir := t.TempDir()
	oca, err := tlsutil.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := oca.IssueFiles(odir, "impostor", up.CAFile(d.dir), tlsutil.LocalLeaf("impostor", "east"))
	if err != nil {
		t.Fatal(err)
	}
	// A certificate of the deployment's own CA that names no region.
	clientFiles := up.ClientFiles(d.dir)
	// One of the deployment's CA naming region "mallory".
	ca, err := tlsutil.LoadCA(up.CAFile(d.dir), filepath.Join(up.TLSDir(d.dir), "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := ca.IssueFiles(odir, "mallory", up.CAFile(d.dir), tlsutil.LocalLeaf("mallory", "mallory"))
	if err != nil {
		t.Fatal(err)
	}
	eastCert, err := ca.IssueFiles(odir, "east-tool", up.CAFile(d.dir), tlsutil.LocalLeaf("east-tool", "east", tlsutil.RoleBroker))
	if err != nil {
		t.Fatal(err)
	}
	// A bookie of east: its certificate names region east, with the role
	// bookie.
	eastBookie := tlsutil.Files{CertFile: filepath.Join(up.TLSDir(d.dir), "east-bookie-1.pem"), KeyFile: filepath.Join(up.TLSDir(d.dir), "east-bookie-1-key.pem"), CAFile: up.CAFile(d.dir)}
	hello := func(files tlsutil.Files, source string) error {
		src, err := tlsutil.NewSource(files)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(westRepl, grpc.WithTransportCredentials(src.GRPCClient()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := replpb.NewReplicationClient(cc).Replicate(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Hello{Hello: &replpb.Hello{
			Version: replpb.ProtocolVersion_PROTOCOL_VERSION_1, Source: source, Target: "west", Topic: topic}}}); err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	for _, c := range []struct {
		name   string
		files  tlsutil.Files
		source string
		code   codes.Code
	}{
		{"another CA's certificate", foreign, "east", codes.Unavailable},
		{"our CA's certificate without a region", clientFiles, "east", codes.PermissionDenied},
		{"our CA's certificate of region mallory", mallory, "east", codes.PermissionDenied},
		{"region mallory speaking for itself", mallory, "mallory", codes.PermissionDenied},
		{"east's bookie's certificate", eastBookie, "east", codes.PermissionDenied},
	} {
		err := hello(c.files, c.source)
		if status.Code(err) != c.code {
			t.Fatalf("%s: replication stream answered %v, want %v", c.name, err, c.code)
		}
	}
	// The checks refuse what they should, and only that: east's identity
	// is welcomed (an answer, not an error).
	if err := hello(eastCert, "east"); err != nil {
		t.Fatalf("a certificate of region east: %v", err)
	}

	// A bookie add stream with another CA's certificate fails; with the
	// deployment's client certificate or a bookie's, Info is answered and
	// the add refused; with a broker's it is served.
	add := func(files tlsutil.Files) error {
		t.Helper()
		src, _ := tlsutil.NewSource(files)
		cc, err := grpc.NewClient(westBookie, grpc.WithTransportCredentials(src.GRPCClient()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = bookiepb.NewBookieClient(cc).Info(ctx, &bookiepb.InfoRequest{})
		if err != nil {
			if files != foreign {
				t.Fatalf("bookie Info with %s: %v", files.CertFile, err)
			}
			return err
		}
		st, err := bookiepb.NewBookieClient(cc).AddEntries(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&bookiepb.AddRequest{RequestId: 1, LedgerId: 1 << 40, EntryId: 0, Payload: []byte("x")}); err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	if err := add(foreign); status.Code(err) != codes.Unavailable {
		t.Fatalf("bookie add stream with another CA's certificate: %v", err)
	}
	for _, f := range []tlsutil.Files{clientFiles, eastBookie} {
		if err := add(f); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "role broker or autorecovery") {
			t.Fatalf("bookie add stream with %s: %v, want PermissionDenied naming the role", f.CertFile, err)
		}
	}
	westBroker := tlsutil.Files{CertFile: filepath.Join(up.TLSDir(d.dir), "west-broker-1.pem"), KeyFile: filepath.Join(up.TLSDir(d.dir), "west-broker-1-key.pem"), CAFile: up.CAFile(d.dir)}
	if err := add(westBroker); err != nil {
		t.Fatalf("bookie add stream with a broker's certificate: %v", err)
	}

	// etcd authentication (up --tls turns it on): a certificate of the
	// deployment's CA whose name is not an etcd user ("mallory") is
	// refused every request by a region's etcd and by the global store;
	// the client certificate (user "client") is served.
	etcdGet := func(files tlsutil.Files, url string) error {
		src, err := tlsutil.NewSource(files)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		s, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{url}, Prefix: "/meridian", TLS: src.ClientConfig("")})
		if err != nil {
			return err
		}
		defer s.Close()
		_, _, err = s.List(ctx, "/")
		return err
	}
	for _, url := range []string{d.region("west").EtcdURL, d.e.GlobalStore[0]} {
		if err := etcdGet(mallory, url); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("etcd %s with a certificate whose name is no etcd user: %v, want permission denied", url, err)
		}
		if err := etcdGet(clientFiles, url); err != nil {
			t.Fatalf("etcd %s with the client certificate: %v", url, err)
		}
	}

	// meridian admin bookies list on a TLS deployment: etcd over mutual
	// TLS as user "client", and each bookie asked for its disk usage
	// over mutual TLS (a bookie that does not answer shows "-").
	out, err := exec.Command(testutil.MeridianBinary(t), "admin", "bookies", "list", "--etcd", d.region("west").EtcdURL, "--region", "west",
		"--tls-cert-file", clientFiles.CertFile, "--tls-key-file", clientFiles.KeyFile, "--tls-trust-certs-file", clientFiles.CAFile).CombinedOutput()
	if err != nil {
		t.Fatalf("admin bookies list: %v: %s", err, out)
	}
	if n := strings.Count(string(out), "% of "); n != 3 {
		t.Fatalf("admin bookies list shows the disk usage of %d of west's 3 bookies:\n%s", n, out)
	}
}
