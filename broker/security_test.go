package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/internal/authtoken"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// dialTLSRaw opens a raw protocol connection over TLS (the standalone's
// CA, hostname checked) and sends CONNECT with the token (nil: none); it
// returns the connection and the broker's first answer.
func dialTLSRaw(t *testing.T, s *testutil.SecureStandalone, token *string) (*rawConn, *pb.BaseCommand) {
	t.Helper()
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c, err := tls.Dial("tcp", strings.TrimPrefix(s.URL, "pulsar+ssl://"), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &rawConn{t: t, c: c, dec: codec.NewDecoder(c, 64<<20)}
	cm := &pb.CommandConnect{ClientVersion: proto.String("raw-test"), ProtocolVersion: proto.Int32(20)}
	if token != nil {
		cm.AuthMethodName, cm.AuthData = proto.String("token"), []byte(*token)
	}
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: cm})
	return r, r.next().Cmd
}

// secureMetric reads one sample of the broker's /metrics as the super-user.
func secureMetric(t *testing.T, s *testutil.SecureStandalone, name, labels string) float64 {
	t.Helper()
	code, body := s.Admin(s.Token(testutil.SuperUser, time.Minute), "GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: HTTP %d %s", code, body)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, labels) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

func secureClient(t *testing.T, s *testutil.SecureStandalone, auth pulsar.Authentication) pulsar.Client {
	t.Helper()
	return secureClientTimeout(t, s, auth, 5*time.Second)
}

func secureClientTimeout(t *testing.T, s *testutil.SecureStandalone, auth pulsar.Authentication, op time.Duration) pulsar.Client {
	t.Helper()
	o := s.ClientOptions(auth)
	o.OperationTimeout = op
	c, err := pulsar.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// setUpTenant makes tenant/ns with the given grants, as the super-user.
func setUpTenant(t *testing.T, s *testutil.SecureStandalone, tenant, ns, adminRole string, grants map[string]string) {
	t.Helper()
	su := s.Token(testutil.SuperUser, time.Hour)
	s.MustAdmin(su, "PUT", "/admin/v2/tenants/"+tenant, fmt.Sprintf(`{"adminRoles":[%q],"allowedClusters":["standalone"]}`, adminRole))
	s.MustAdmin(su, "PUT", "/admin/v2/namespaces/"+tenant+"/"+ns, `{}`)
	for role, actions := range grants {
		var quoted []string
		for _, a := range strings.Split(actions, ",") {
			quoted = append(quoted, strconv.Quote(a))
		}
		s.MustAdmin(su, "POST", "/admin/v2/namespaces/"+tenant+"/"+ns+"/permissions/"+role, "["+strings.Join(quoted, ",")+"]")
	}
}

// Security issue test 1: with TLS and token authentication on, the
// unmodified Go client with a valid token produces and consumes over
// pulsar+ssl:// (hostname verification on); without a token, with an
// expired or a forged one, or with a role lacking produce/consume, it is
// refused — authentication errors at CONNECT, AuthorizationError for the
// role — and nothing is written.
func TestTLSTokenAuthProduceConsume(t *testing.T) {
	// Debug logs: the check at the end finds no secret in any of them.
	s := testutil.StartSecureStandalone(t, t.TempDir(), "--log-level", "debug")
	setUpTenant(t, s, "acme", "app", "acme-admin", map[string]string{"writer": "produce", "reader": "consume"})
	topic := "persistent://acme/app/orders"

	reader := secureClient(t, s, pulsar.NewAuthenticationToken(s.Token("reader", time.Hour)))
	cons, err := reader.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatalf("reader subscribes: %v", err)
	}
	defer cons.Close()
	writer := secureClient(t, s, pulsar.NewAuthenticationToken(s.Token("writer", time.Hour)))
	prod, err := writer.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("writer creates a producer: %v", err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 10 {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i))}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i := range 10 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if string(m.Payload()) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %q", i, m.Payload())
		}
		cons.Ack(m)
	}

	// Refused at CONNECT: what the broker answers, on the wire.
	expired := s.Token("writer", -time.Minute)
	other, _ := authtoken.NewSecretKey()
	forged, _ := authtoken.CreateWithSecret(other, "writer", time.Time{})
	for _, c := range []struct {
		name  string
		token *string
		want  string
	}{
		{"no token", nil, "requires a token"},
		{"expired token", &expired, "token expired"},
		{"forged token", &forged, "signature does not verify"},
	} {
		r, first := dialTLSRaw(t, s, c.token)
		if first.GetType() != pb.BaseCommand_ERROR || first.GetError().GetError() != pb.ServerError_AuthenticationError {
			t.Fatalf("%s: CONNECT answered %v", c.name, first)
		}
		if msg := first.GetError().GetMessage(); !strings.Contains(msg, c.want) || strings.Contains(msg, expired) || strings.Contains(msg, forged) {
			t.Fatalf("%s: message %q (want %q, without the token)", c.name, msg, c.want)
		}
		if !r.closedByBroker() {
			t.Fatalf("%s: connection left open", c.name)
		}
	}
	// ... and what the Go client sees: its producer and consumer creations fail.
	for name, auth := range map[string]pulsar.Authentication{
		"no token": nil, "expired token": pulsar.NewAuthenticationToken(expired), "forged token": pulsar.NewAuthenticationToken(forged),
	} {
		c := secureClientTimeout(t, s, auth, 2*time.Second)
		if p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
			p.Close()
			t.Fatalf("%s: a producer was created", name)
		}
		if sc, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "intruder"}); err == nil {
			sc.Close()
			t.Fatalf("%s: a consumer was created", name)
		}
	}
	// Authenticated, but the role lacks the permission.
	if p, err := reader.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "AuthorizationError") {
		if p != nil {
			p.Close()
		}
		t.Fatalf("reader producing: %v, want AuthorizationError", err)
	}
	if sc, err := writer.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "w"}); err == nil || !strings.Contains(err.Error(), "AuthorizationError") {
		if sc != nil {
			sc.Close()
		}
		t.Fatalf("writer consuming: %v, want AuthorizationError", err)
	}
	stranger := secureClient(t, s, pulsar.NewAuthenticationToken(s.Token("stranger", time.Hour)))
	if p, err := stranger.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "AuthorizationError") {
		if p != nil {
			p.Close()
		}
		t.Fatalf("stranger producing: %v, want AuthorizationError", err)
	}

	// Nothing was written: the next message the reader gets is the
	// writer's next one, and the topic took 11 messages in all.
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload()) != "after" {
		t.Fatalf("after the refusals: %v %q", err, m.Payload())
	}
	stats := s.MustAdmin(s.Token(testutil.SuperUser, time.Minute), "GET", "/admin/v2/persistent/acme/app/orders/stats", "")
	if !strings.Contains(stats, `"msgInCounter":11`) || strings.Contains(stats, "intruder") {
		t.Fatalf("stats after the refusals: %s", stats)
	}

	// The admin API: 401 without a valid token, 403 without the permission.
	for name, tok := range map[string]string{"none": "", "expired": expired, "forged": forged} {
		if code, body := s.Admin(tok, "GET", "/admin/v2/namespaces/acme/app/topics", ""); code != 401 {
			t.Fatalf("admin with %s token: HTTP %d %s", name, code, body)
		}
	}
	if code, body := s.Admin(s.Token("reader", time.Minute), "GET", "/admin/v2/tenants", ""); code != 403 {
		t.Fatalf("reader listing tenants: HTTP %d %s", code, body)
	}
	if code, body := s.Admin(s.Token("reader", time.Minute), "GET", "/admin/v2/namespaces/acme/app/topics", ""); code != 200 || !strings.Contains(body, "orders") {
		t.Fatalf("reader listing its namespace: HTTP %d %s", code, body)
	}
	if n := secureMetric(t, s, "meridian_broker_auth_failures_total", `reason="expired"`); n == 0 {
		t.Fatal("expired tokens not counted")
	}
	if n := secureMetric(t, s, "meridian_broker_authorization_denied_total", `operation="produce"`); n == 0 {
		t.Fatal("denied producers not counted")
	}

	// Secrets never reach the log: no token (valid, expired or forged),
	// not the secret key, not a private key.
	logged, err := os.ReadFile(s.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logged), "authentication refused") {
		t.Fatalf("the debug log has no refusal: not a meaningful check (%d bytes)", len(logged))
	}
	for name, secret := range map[string]string{
		"writer token": s.Token("writer", time.Hour)[:40], "expired token": expired, "forged token": forged,
		"secret key": base64.StdEncoding.EncodeToString(s.Secret), "raw secret key": string(s.Secret), "private key": "PRIVATE KEY",
	} {
		if strings.Contains(string(logged), secret) {
			t.Fatalf("the broker's log contains the %s", name)
		}
	}
}

// A long-lived connection whose token expires is challenged
// (AUTH_CHALLENGE): a client whose token supplier hands out fresh tokens
// keeps producing on it; one stuck with the expired token is cut off.
func TestTokenRefreshOnLongLivedConnection(t *testing.T) {
	s := testutil.StartSecureStandalone(t, t.TempDir(), "--auth-refresh-check", "500ms")
	setUpTenant(t, s, "acme", "app", "acme-admin", map[string]string{"writer": "produce"})
	topic := "persistent://acme/app/refresh"

	fresh := secureClient(t, s, pulsar.NewAuthenticationTokenFromSupplier(func() (string, error) {
		return s.Token("writer", 2*time.Second), nil
	}))
	p, err := fresh.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	deadline := time.Now().Add(6 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))})
		cancel()
		if err != nil {
			t.Fatalf("send %d across token refreshes: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := secureMetric(t, s, "meridian_broker_auth_refresh_total", `result="refreshed"`); n < 2 {
		t.Fatalf("%v refreshes in 6 s of 2 s tokens", n)
	}
	if n := secureMetric(t, s, "meridian_broker_auth_refresh_total", `result="refused"`); n != 0 {
		t.Fatalf("%v refreshes refused for the fresh-token client", n)
	}

	// A token that cannot be renewed: after it expires the broker refuses
	// the client's answer (the same, expired token) and closes.
	static := secureClient(t, s, pulsar.NewAuthenticationToken(s.Token("writer", 2*time.Second)))
	sp, err := static.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	testutil.Eventually(t, 20*time.Second, "the expired connection is cut off", func() bool {
		return secureMetric(t, s, "meridian_broker_auth_refresh_total", `result="refused"`) >= 1
	})
}

// answer is a refusal reduced to what a client can observe: the code and
// the message with the name it asked for replaced by NAME.
type answer struct {
	typ  pb.BaseCommand_Type
	code pb.ServerError
	msg  string
}

func (r *rawConn) ask(cmd *pb.BaseCommand) *pb.BaseCommand {
	r.t.Helper()
	r.send(cmd)
	for {
		f := r.next()
		if t := f.Cmd.GetType(); t != pb.BaseCommand_PING && t != pb.BaseCommand_PONG {
			return f.Cmd
		}
	}
}

// probeTopic sends LOOKUP, PARTITIONED_METADATA, PRODUCER and SUBSCRIBE
// for topic and returns the answers, the name replaced by NAME.
func probeTopic(r *rawConn, topic string, id uint64) []answer {
	norm := func(s string) string { return strings.ReplaceAll(s, topic, "NAME") }
	var out []answer
	lr := r.ask(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String(topic), RequestId: proto.Uint64(id)}})
	out = append(out, answer{lr.GetType(), lr.GetLookupTopicResponse().GetError(), norm(lr.GetLookupTopicResponse().GetMessage())})
	pm := r.ask(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{Topic: proto.String(topic), RequestId: proto.Uint64(id + 1)}})
	out = append(out, answer{pm.GetType(), pm.GetPartitionMetadataResponse().GetError(), norm(pm.GetPartitionMetadataResponse().GetMessage())})
	pr := r.ask(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id + 2)}})
	out = append(out, answer{pr.GetType(), pr.GetError().GetError(), norm(pr.GetError().GetMessage())})
	sr := r.ask(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{Topic: proto.String(topic), Subscription: proto.String("s"),
		SubType: pb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(id + 3)}})
	out = append(out, answer{sr.GetType(), sr.GetError().GetError(), norm(sr.GetError().GetMessage())})
	return out
}

func probeNamespace(r *rawConn, ns string, id uint64) answer {
	gt := r.ask(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
		Namespace: proto.String(ns), RequestId: proto.Uint64(id), Mode: pb.CommandGetTopicsOfNamespace_PERSISTENT.Enum()}})
	return answer{gt.GetType(), gt.GetError().GetError(), strings.ReplaceAll(gt.GetError().GetMessage(), ns, "NAME")}
}

// Security issue test 2: a tenant-A role cannot list, look up, produce to
// or consume from tenant B's topics — LOOKUP, PARTITIONED_METADATA,
// GET_TOPICS_OF_NAMESPACE, PRODUCER, SUBSCRIBE, and the admin API — and
// what it gets for B's real topics is what it gets for names that do not
// exist.
func TestTenantIsolation(t *testing.T) {
	s := testutil.StartSecureStandalone(t, t.TempDir())
	setUpTenant(t, s, "tenant-a", "app", "a-admin", map[string]string{"a-user": "produce,consume"})
	setUpTenant(t, s, "tenant-b", "app", "b-admin", map[string]string{"b-user": "produce,consume"})
	bToken := s.Token("b-user", time.Hour)
	b := secureClient(t, s, pulsar.NewAuthenticationToken(bToken))
	bp, err := b.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://tenant-b/app/secret"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bp.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("b's data")}); err != nil {
		t.Fatal(err)
	}
	bp.Close()
	su := s.Token(testutil.SuperUser, time.Hour)
	s.MustAdmin(su, "PUT", "/admin/v2/persistent/tenant-b/app/parted/partitions", "3")

	aToken := s.Token("a-user", time.Hour)
	r, first := dialTLSRaw(t, s, &aToken)
	if first.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("a-user CONNECT: %v", first)
	}
	// Its own tenant works.
	if lr := r.ask(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String("persistent://tenant-a/app/mine"), RequestId: proto.Uint64(1)}}); lr.GetLookupTopicResponse().GetResponse() != pb.CommandLookupTopicResponse_Connect {
		t.Fatalf("a-user looking up its own topic: %v", lr)
	}

	existing := []string{"persistent://tenant-b/app/secret", "persistent://tenant-b/app/parted", "persistent://tenant-b/app/parted-partition-1"}
	missing := []string{"persistent://tenant-b/app/nothing", "persistent://tenant-b/no-ns/x", "persistent://no-tenant/app/x"}
	var want []answer
	for i, topic := range append(existing, missing...) {
		got := probeTopic(r, topic, uint64(100+10*i))
		for _, a := range got {
			if a.code != pb.ServerError_AuthorizationError {
				t.Fatalf("%s: answered %v %v %q, want AuthorizationError", topic, a.typ, a.code, a.msg)
			}
		}
		if want == nil {
			want = got
			t.Logf("the refusal: %+v", want)
		} else if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s is told apart:\n got %+v\nwant %+v", topic, got, want)
		}
	}
	var nsWant *answer
	for i, ns := range []string{"tenant-b/app", "tenant-b/no-ns", "no-tenant/app"} {
		got := probeNamespace(r, ns, uint64(500+i))
		if got.code != pb.ServerError_AuthorizationError {
			t.Fatalf("topics of %s: %+v", ns, got)
		}
		if nsWant == nil {
			nsWant = &got
		} else if got != *nsWant {
			t.Fatalf("topics of %s told apart: %+v vs %+v", ns, got, *nsWant)
		}
	}
	// The connection still serves its own topics after the refusals.
	if lr := r.ask(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String("persistent://tenant-a/app/mine"), RequestId: proto.Uint64(2)}}); lr.GetLookupTopicResponse().GetResponse() != pb.CommandLookupTopicResponse_Connect {
		t.Fatalf("a-user looking up its own topic after the refusals: %v", lr)
	}
	// For a role that may act there (B's tenant admin), a missing
	// namespace is TopicNotFound: the refusals above did not merely
	// coincide with "does not exist".
	bAdmin := s.Token("b-admin", time.Hour)
	rb, _ := dialTLSRaw(t, s, &bAdmin)
	if a := probeTopic(rb, "persistent://tenant-b/no-ns/x", 900)[0]; a.code != pb.ServerError_TopicNotFound {
		t.Fatalf("b-admin on its own missing namespace: %+v", a)
	}

	// The admin API: 403 with the same body for what exists and what not.
	aAdmin := s.Token("a-admin", time.Hour)
	for _, tok := range []string{aToken, aAdmin} {
		for _, pair := range [][2]string{
			{"/admin/v2/namespaces/tenant-b/app/topics", "/admin/v2/namespaces/tenant-b/no-ns/topics"},
			{"/admin/v2/persistent/tenant-b/app", "/admin/v2/persistent/no-tenant/app"},
			{"/admin/v2/persistent/tenant-b/app/secret/stats", "/admin/v2/persistent/tenant-b/app/nothing/stats"},
			{"/admin/v2/persistent/tenant-b/app/parted/partitions", "/admin/v2/persistent/tenant-b/app/nothing/partitions"},
			{"/admin/v2/namespaces/tenant-b/app", "/admin/v2/namespaces/no-tenant/app"},
			{"/admin/v2/namespaces/tenant-b/app/permissions", "/admin/v2/namespaces/tenant-b/no-ns/permissions"},
			{"/admin/v2/namespaces/tenant-b", "/admin/v2/namespaces/no-tenant"},
			{"/admin/v2/tenants/tenant-b", "/admin/v2/tenants/no-tenant"},
			{"/admin/v2/schemas/tenant-b/app/secret/schema", "/admin/v2/schemas/tenant-b/app/nothing/schema"},
		} {
			c1, b1 := s.Admin(tok, "GET", pair[0], "")
			c2, b2 := s.Admin(tok, "GET", pair[1], "")
			n1 := strings.ReplaceAll(b1, adminName(pair[0]), "NAME")
			n2 := strings.ReplaceAll(b2, adminName(pair[1]), "NAME")
			if c1 != 403 || c2 != 403 || n1 != n2 {
				t.Fatalf("admin %s vs %s: HTTP %d %s / HTTP %d %s", pair[0], pair[1], c1, b1, c2, b2)
			}
		}
		// Writes too.
		if c, body := s.Admin(tok, "POST", "/admin/v2/namespaces/tenant-b/app/permissions/a-user", `["consume"]`); c != 403 {
			t.Fatalf("a granting itself b's namespace: HTTP %d %s", c, body)
		}
		if c, body := s.Admin(tok, "DELETE", "/admin/v2/persistent/tenant-b/app/secret?force=true", ""); c != 403 {
			t.Fatalf("a deleting b's topic: HTTP %d %s", c, body)
		}
	}
	// Tenant A's admin manages its own tenant.
	if c, body := s.Admin(aAdmin, "GET", "/admin/v2/namespaces/tenant-a/app/permissions", ""); c != 200 || !strings.Contains(body, "a-user") {
		t.Fatalf("a-admin reading its permissions: HTTP %d %s", c, body)
	}
	// B's data is intact.
	bc, err := b.Subscribe(pulsar.ConsumerOptions{Topic: "persistent://tenant-b/app/secret", SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if m, err := bc.Receive(ctx); err != nil || string(m.Payload()) != "b's data" {
		t.Fatalf("b's message: %v", err)
	}
}

// adminName is the name an admin path asks about, as the refusal quotes
// it: the topic, the namespace or the tenant.
func adminName(path string) string {
	p := strings.TrimPrefix(path, "/admin/v2/")
	parts := strings.Split(p, "/")
	switch parts[0] {
	case "persistent", "schemas":
		if len(parts) >= 4 {
			return "persistent://" + strings.Join(parts[1:4], "/")
		}
		return strings.Join(parts[1:3], "/")
	case "namespaces":
		if len(parts) >= 3 {
			return strings.Join(parts[1:3], "/")
		}
		return parts[1]
	case "tenants":
		return parts[1]
	}
	return p
}

// Security issue test 4: certificate rotation. The broker's certificate
// files are replaced while it runs: new connections get the new
// certificate without a restart, and a producer connected before keeps
// sending on its connection.
func TestCertificateRotationWithoutRestart(t *testing.T) {
	s := testutil.StartSecureStandalone(t, t.TempDir())
	setUpTenant(t, s, "acme", "app", "acme-admin", map[string]string{"writer": "produce"})
	serial := func() string {
		tok := s.Token("writer", time.Minute)
		r, first := dialTLSRaw(t, s, &tok)
		if first.GetType() != pb.BaseCommand_CONNECTED {
			t.Fatalf("CONNECT: %v", first)
		}
		defer r.c.Close()
		return r.c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	writer := secureClient(t, s, pulsar.NewAuthenticationToken(s.Token("writer", time.Hour)))
	p, err := writer.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://acme/app/rot", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(what string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(what)}); err != nil {
			t.Fatalf("send %s: %v", what, err)
		}
	}
	send("before")
	su := s.Token(testutil.SuperUser, time.Hour)
	// The producer's connection, as the broker sees it (client address).
	producerAddr := func() string {
		var st struct {
			Publishers []struct{ Address string }
		}
		if err := json.Unmarshal([]byte(s.MustAdmin(su, "GET", "/admin/v2/persistent/acme/app/rot/stats", "")), &st); err != nil || len(st.Publishers) != 1 {
			t.Fatalf("publishers: %+v %v", st, err)
		}
		return st.Publishers[0].Address
	}
	addrBefore := producerAddr()

	dir := filepath.Join(s.DataDir, "tls")
	ca, err := tlsutil.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.IssueFiles(dir, "standalone", filepath.Join(dir, "ca.pem"), tlsutil.LocalLeaf("standalone", "standalone", tlsutil.AllRoles...)); err != nil {
		t.Fatal(err)
	}
	after := serial()
	if after == before {
		t.Fatalf("a new connection still gets the old certificate %s", before)
	}
	// The old connection carries on: the producer's sends succeed on the
	// same connection (same client address).
	for i := range 5 {
		send(fmt.Sprintf("after-%d", i))
	}
	if a := producerAddr(); a != addrBefore {
		t.Fatalf("the producer reconnected: %s → %s", addrBefore, a)
	}
	// A new Go client verifies the new certificate against the CA.
	fresh := secureClient(t, s, pulsar.NewAuthenticationToken(s.Token("writer", time.Hour)))
	p2, err := fresh.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://acme/app/rot"})
	if err != nil {
		t.Fatalf("a new client after the rotation: %v", err)
	}
	p2.Close()
	if exited, _ := s.Exited(); exited {
		t.Fatal("the standalone restarted or died")
	}
}
