package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// listenerBroker is a broker process with two listeners: internal on
// 127.0.0.1 (its main socket) and external on 127.0.0.2, a second real
// socket bound for it (--bind-addresses): a loopback alias, so which of
// the two a client dialled shows in its sockets.
type listenerBroker struct {
	*testutil.BrokerProc
	internal, external string // host:port
}

func addListenerBroker(t *testing.T, r *testutil.Region, id string, extra ...string) listenerBroker {
	t.Helper()
	internal := testutil.FreeAddr(t)
	external := "127.0.0.2:" + strconv.Itoa(testutil.FreePort(t))
	args := append([]string{
		"--advertised-listeners", "internal:pulsar://" + internal + ",external:pulsar://" + external,
		"--bind-addresses", "external:pulsar://" + external,
		"--internal-listener-name", "internal"}, extra...)
	return listenerBroker{r.AddBrokerAt(id, internal, args...), internal, external}
}

// established counts this machine's established TCP connections whose
// remote end is addr (host:port), read from /proc/net/tcp: the client
// sides of connections to a broker's socket (brokers of one region never
// dial each other's Pulsar sockets).
func established(t *testing.T, addr string) int {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host).To4()
	p, _ := strconv.Atoi(port)
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], p)
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.EqualFold(f[2], want) && f[3] == "01" {
			n++
		}
	}
	return n
}

// Requirement (issue 28, Pulsar's advertised listeners): a client naming
// the listener "external" (pulsar-client-go's ListenerName) is sent to,
// and connects to, the brokers' external addresses — through a lookup
// redirected between brokers, and after a hand-off that closes its
// producer (CLOSE_PRODUCER's assigned URL is the new owner's external
// one) — and never to an internal one; a client naming none gets the
// internal addresses; a lookup naming no listener on the external socket
// is answered in the external listener (PIP-95); a listener the brokers
// lack fails at once with Pulsar's error.
func TestAdvertisedListenersSendEachClientToItsListener(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	b1 := addListenerBroker(t, r, "broker-1")
	b2 := addListenerBroker(t, r, "broker-2")
	brokers := map[string]listenerBroker{b1.ID: b1, b2.ID: b2}
	topic := topicName(t)

	// External: the service URL is broker-1's external address.
	ext, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + b1.external, ListenerName: "external", OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	p, err := ext.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	send := func(i int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	send(0)
	owner := brokers[ownerOf(t, r)]
	other := b1
	if owner.ID == b1.ID {
		other = b2
	}
	if n := established(t, owner.external); n == 0 {
		t.Fatalf("the external client has no connection to the owner %s's external address %s", owner.ID, owner.external)
	}
	for _, b := range brokers {
		if n := established(t, b.internal); n != 0 {
			t.Fatalf("the external client has %d connections to %s's internal address %s", n, b.ID, b.internal)
		}
	}

	// The raw lookups: in each listener, and on the external socket
	// without a name.
	lookup := func(at, listener string) *pb.CommandLookupTopicResponse {
		t.Helper()
		raw := dialRaw(t, "pulsar://"+at)
		defer raw.c.Close()
		cmd := &pb.CommandLookupTopic{Topic: proto.String(topic), RequestId: proto.Uint64(1)}
		if listener != "" {
			cmd.AdvertisedListenerName = proto.String(listener)
		}
		return raw.ask(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: cmd}).GetLookupTopicResponse()
	}
	for _, c := range []struct{ at, listener, want string }{
		{other.internal, "", owner.internal},
		{other.internal, "internal", owner.internal},
		{other.internal, "external", owner.external},
		{other.external, "", owner.external},
		{other.external, "internal", owner.internal},
	} {
		resp := lookup(c.at, c.listener)
		if resp.GetResponse() != pb.CommandLookupTopicResponse_Connect || resp.GetBrokerServiceUrl() != "pulsar://"+c.want {
			t.Errorf("lookup at %s naming %q: %v %s %v %s, want Connect pulsar://%s", c.at, c.listener, resp.GetResponse(), resp.GetBrokerServiceUrl(), resp.GetError(), resp.GetMessage(), c.want)
		}
	}
	resp := lookup(other.internal, "public")
	if resp.GetResponse() != pb.CommandLookupTopicResponse_Failed || resp.GetError() != pb.ServerError_ServiceNotReady ||
		!strings.Contains(resp.GetMessage(), "the broker do not have public listener") {
		t.Errorf("lookup naming an unknown listener: %v %v %q", resp.GetResponse(), resp.GetError(), resp.GetMessage())
	}

	// Internal: a client naming no listener is sent to internal addresses.
	in, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + other.internal, OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cons, err := in.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if n := established(t, owner.internal); n == 0 {
		t.Fatalf("the internal client has no connection to the owner's internal address %s", owner.internal)
	}

	// An unknown listener fails at once, with Pulsar's error code.
	bad, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + b1.internal, ListenerName: "public", OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	start := time.Now()
	if _, err := bad.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "ServiceNotReady") {
		t.Errorf("a producer naming listener public: %v, want ServiceNotReady", err)
	} else if d := time.Since(start); d > 10*time.Second {
		t.Errorf("a producer naming listener public failed after %v, want at once", d)
	}

	// A hand-off: the owner stops (SIGTERM), its bundle moves to the other
	// broker, the producer is told the other's external address.
	owner.Signal(syscall.SIGTERM)
	owner.Wait(60 * time.Second)
	send(1)
	if n := established(t, other.external); n == 0 {
		t.Fatalf("after the hand-off the external client has no connection to %s's external address %s", other.ID, other.external)
	}
	if n := established(t, other.internal); n != 1 {
		// One: the internal client's consumer, moved there too.
		t.Errorf("after the hand-off: %d connections to %s's internal address, want the internal client's one", n, other.internal)
	}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		cons.Ack(m)
	}
}

// wildListenerBroker is addListenerBroker with the admin API listening on
// every interface (0.0.0.0, as in a container): reachable at 127.0.0.1
// and at 127.0.0.2, the external listener's host, whose web service URL
// is http://127.0.0.2:PORT (Pulsar's NAME:http:// listener entry).
func wildListenerBroker(t *testing.T, r *testutil.Region, id string) (listenerBroker, string) {
	t.Helper()
	internal := testutil.FreeAddr(t)
	external := "127.0.0.2:" + strconv.Itoa(testutil.FreePort(t))
	port := strconv.Itoa(testutil.FreePort(t))
	p := testutil.StartProc(t, id, testutil.MeridianBinary(t), "broker", "--region", r.Name, "--etcd", r.EtcdURL, "--id", id,
		"--listen", internal, "--admin", "0.0.0.0:"+port, "--replication-listen", testutil.FreeAddr(t), "--log-level", "warn",
		"--advertised-listeners", "internal:pulsar://"+internal+",external:pulsar://"+external+",external:http://127.0.0.2:"+port,
		"--bind-addresses", "external:pulsar://"+external, "--internal-listener-name", "internal", "--shutdown-drain-delay", "0s")
	b := &testutil.BrokerProc{Proc: p, ID: id, Addr: internal, AdminAddr: "127.0.0.1:" + port}
	testutil.WaitHTTP(t, b.AdminURL()+"/admin/v2/tenants", 60*time.Second)
	return listenerBroker{b, internal, external}, port
}

// Requirement (issue 28, advertised listeners over HTTP): an HTTP lookup
// (/lookup/v2/topic/...) is answered in the listener the client asks for
// — Pulsar's listenerName query parameter or X-Pulsar-ListenerName
// header — or, naming none, in the listener whose host the client reached
// the broker by — its brokerUrl and its httpUrl that listener's (the
// external listener's http:// entry; the internal listener, naming none,
// the owner's admin URL): the unmodified pulsar-client-go given an http:// service
// URL on the brokers' external host and ListenerName "external" (it sends
// no listener name over HTTP) produces through the owner's external
// address, never an internal one; one given the internal host consumes
// through the internal one. The admin API, listening on 0.0.0.0, names
// every broker by its advertised host (the brokers list, the lookup's
// httpUrl), never a wildcard. A topic's admin call reaching a broker that
// does not own the topic is redirected (307) to the owner's web service
// URL in the caller's listener.
func TestHTTPLookupAnswersInTheClientsListener(t *testing.T) {
	r := testutil.StartRegion(t, "east", "r1", "r2", "r3")
	b1, port1 := wildListenerBroker(t, r, "broker-1")
	b2, port2 := wildListenerBroker(t, r, "broker-2")
	brokers := map[string]listenerBroker{b1.ID: b1, b2.ID: b2}
	topic := topicName(t)

	ext, err := pulsar.NewClient(pulsar.ClientOptions{URL: "http://127.0.0.2:" + port1, ListenerName: "external", OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	p, err := ext.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	owner := brokers[ownerOf(t, r)]
	other := b1
	if owner.ID == b1.ID {
		other = b2
	}
	if n := established(t, owner.external); n == 0 {
		t.Fatalf("the external HTTP-lookup client has no connection to the owner %s's external address %s", owner.ID, owner.external)
	}
	for _, b := range brokers {
		if n := established(t, b.internal); n != 0 {
			t.Fatalf("the external HTTP-lookup client has %d connections to %s's internal address %s", n, b.ID, b.internal)
		}
	}

	in, err := pulsar.NewClient(pulsar.ClientOptions{URL: "http://127.0.0.1:" + port2, OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cons, err := in.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if m, err := cons.Receive(ctx); err != nil || string(m.Payload()) != "0" {
		t.Fatalf("receive: %v", err)
	}
	if n := established(t, owner.internal); n == 0 {
		t.Fatalf("the internal HTTP-lookup client has no connection to the owner's internal address %s", owner.internal)
	}

	// The raw lookups, at the other broker (the owner is found in etcd).
	otherPort := port1
	if other.ID == b2.ID {
		otherPort = port2
	}
	ownerPort := port1
	if owner.ID == b2.ID {
		ownerPort = port2
	}
	ownerAdmin, ownerExtHTTP := "http://127.0.0.1:"+ownerPort, "http://127.0.0.2:"+ownerPort
	path := "/lookup/v2/topic/persistent/" + strings.TrimPrefix(topic, "persistent://")
	for _, c := range []struct{ host, query, header, want, wantHTTP string }{
		{"127.0.0.1", "", "", owner.internal, ownerAdmin},
		{"127.0.0.2", "", "", owner.external, ownerExtHTTP},
		{"127.0.0.1", "?listenerName=external", "", owner.external, ownerExtHTTP},
		{"127.0.0.1", "", "external", owner.external, ownerExtHTTP},
		{"127.0.0.2", "?listenerName=internal", "", owner.internal, ownerAdmin},
		{"127.0.0.2", "", "internal", owner.internal, ownerAdmin},
	} {
		req, _ := http.NewRequest("GET", "http://"+c.host+":"+otherPort+path+c.query, nil)
		if c.header != "" {
			req.Header.Set("X-Pulsar-ListenerName", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ld struct {
			BrokerURL string `json:"brokerUrl"`
			HTTPURL   string `json:"httpUrl"`
		}
		json.NewDecoder(resp.Body).Decode(&ld)
		resp.Body.Close()
		if resp.StatusCode != 200 || ld.BrokerURL != "pulsar://"+c.want || ld.HTTPURL != c.wantHTTP {
			t.Errorf("HTTP lookup at %s%s (header %q): %d %+v, want brokerUrl pulsar://%s httpUrl %s", c.host, c.query, c.header, resp.StatusCode, ld, c.want, c.wantHTTP)
		}
	}

	// pulsaradmin's Topics().Lookup (it names no listener) on the external
	// host: the external listener's URLs.
	extAdm, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: "http://127.0.0.2:" + otherPort})
	if err != nil {
		t.Fatal(err)
	}
	tname, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	ld, err := extAdm.Topics().Lookup(*tname)
	if err != nil || ld.BrokerURL != "pulsar://"+owner.external || ld.HTTPURL != ownerExtHTTP {
		t.Errorf("pulsaradmin lookup on the external host: %+v %v, want brokerUrl pulsar://%s httpUrl %s", ld, err, owner.external, ownerExtHTTP)
	}

	// The owner redirect of a topic's admin call at the other broker, in
	// each listener: the owner's web service URL in it.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	statsPath := "/admin/v2/persistent/" + strings.TrimPrefix(topic, "persistent://") + "/stats"
	for _, c := range []struct{ host, header, want string }{
		{"127.0.0.1", "", ownerAdmin},
		{"127.0.0.2", "", ownerExtHTTP},
		{"127.0.0.1", "external", ownerExtHTTP},
		{"127.0.0.2", "internal", ownerAdmin},
	} {
		req, _ := http.NewRequest("GET", "http://"+c.host+":"+otherPort+statsPath, nil)
		if c.header != "" {
			req.Header.Set("X-Pulsar-ListenerName", c.header)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusTemporaryRedirect || !strings.HasPrefix(loc, c.want+statsPath+"?") {
			t.Errorf("stats at %s (header %q): %d Location %q, want 307 to %s%s", c.host, c.header, resp.StatusCode, loc, c.want, statsPath)
		}
	}
	if _, err := extAdm.Topics().GetStats(*tname); err != nil {
		t.Errorf("pulsaradmin stats on the external host, redirected to the owner: %v", err)
	}
	resp, err := http.Get("http://127.0.0.1:" + otherPort + path + "?listenerName=public")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 200 || !strings.Contains(string(body), "the broker do not have public listener") {
		t.Errorf("HTTP lookup naming listener public: %d %s, want Pulsar's error", resp.StatusCode, body)
	}

	// The brokers list (pulsaradmin's Brokers().GetActiveBrokers): the
	// advertised host and the admin port, never 0.0.0.0 or [::].
	adm, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: "http://127.0.0.1:" + port1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := adm.Brokers().GetActiveBrokers("east")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	want := []string{"127.0.0.1:" + port1, "127.0.0.1:" + port2}
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("active brokers %v, want %v", got, want)
	}
}
