package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// rssBytes reads a process's resident set size (VmRSS).
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// metricValue reads one sample from the admin API's /metrics ("" matches
// the metric's first sample).
func metricValue(t *testing.T, adminURL, name, labels string) float64 {
	t.Helper()
	resp, err := http.Get(adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var seen []string
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "meridian_broker_") && len(seen) < 50 {
			seen = append(seen, sc.Text())
		}
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, labels) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Fatalf("metric %s{%s} not exported (status %d, scan error %v); seen:\n%s", name, labels, resp.StatusCode, sc.Err(), strings.Join(seen, "\n"))
	return 0
}

// roundTrip checks that a normal client still produces and consumes.
func roundTrip(t *testing.T, url string) {
	t.Helper()
	client := newPulsarClient(t, url)
	topic := topicName(t)
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "rt", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 100, nil)
	receiveN(t, c, 100, true)
}

// floodGen makes hostile frames from a seeded source.
type floodGen struct {
	rng   *rand.Rand
	valid [][]byte // well-formed frames to mutate
}

// names the random commands draw their strings from: a few valid topics
// (so they reach topic loading without creating topics without bound),
// path tricks, and random bytes.
var floodStrings = []string{
	"persistent://public/default/flood-0", "persistent://public/default/flood-1", "flood-2",
	"public/default", "persistent://public/../x", "persistent://../../etc/passwd", "a/b/c/d",
	"non-persistent://public/default/x", "persistent://public/default/", "", "sub", "s-1",
}

func (g *floodGen) str() string {
	if g.rng.IntN(4) == 0 {
		return string(g.bytes(40))
	}
	return floodStrings[g.rng.IntN(len(floodStrings))]
}

func (g *floodGen) bytes(max int) []byte {
	b := make([]byte, g.rng.IntN(max+1))
	for i := range b {
		b[i] = byte(g.rng.Uint32())
	}
	return b
}

func (g *floodGen) uint() uint64 {
	switch g.rng.IntN(5) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64
	case 2:
		return uint64(g.rng.Uint32())
	default:
		return uint64(g.rng.IntN(4))
	}
}

func (g *floodGen) scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	u := g.uint()
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(u%2 == 0)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if g.rng.IntN(8) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(int32(u)))
		}
		return protoreflect.ValueOfEnum(vals.Get(g.rng.IntN(vals.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(u))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(u))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(u))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(u)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(g.rng.NormFloat64()))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(g.rng.NormFloat64())
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(g.str())
	default: // bytes
		return protoreflect.ValueOfBytes(g.bytes(64))
	}
}

// fill sets random values in m: required fields almost always, others half
// the time, nested messages a few levels deep.
func (g *floodGen) fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Cardinality() == protoreflect.Required {
			if g.rng.IntN(20) == 0 {
				continue
			}
		} else if g.rng.IntN(2) == 0 {
			continue
		}
		isMsg := fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
		switch {
		case fd.IsMap():
		case fd.IsList():
			l := m.Mutable(fd).List()
			for n := g.rng.IntN(4); n > 0; n-- {
				if isMsg {
					if depth > 3 {
						break
					}
					e := l.NewElement()
					g.fill(e.Message(), depth+1)
					l.Append(e)
				} else {
					l.Append(g.scalar(fd))
				}
			}
		case isMsg:
			if depth <= 3 {
				g.fill(m.Mutable(fd).Message(), depth+1)
			}
		default:
			m.Set(fd, g.scalar(fd))
		}
	}
}

// command is a random command of a random type with random field values.
func (g *floodGen) command() []byte {
	vals := pb.BaseCommand_Type(0).Descriptor().Values()
	t := pb.BaseCommand_Type(vals.Get(g.rng.IntN(vals.Len())).Number())
	if t == pb.BaseCommand_CONNECT && g.rng.IntN(4) != 0 {
		t = pb.BaseCommand_LOOKUP // a second CONNECT ends the connection; keep it rarer
	}
	cmd := &pb.BaseCommand{Type: t.Enum()}
	m := cmd.ProtoReflect()
	if fd := m.Descriptor().Fields().ByNumber(protoreflect.FieldNumber(t)); fd != nil && fd.Kind() == protoreflect.MessageKind {
		g.fill(m.Mutable(fd).Message(), 0)
	}
	body, err := proto.MarshalOptions{AllowPartial: true}.Marshal(cmd)
	if err != nil {
		panic(err)
	}
	f := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	f = binary.BigEndian.AppendUint32(f, uint32(len(body)))
	return append(f, body...)
}

// frame returns the next hostile frame and whether to close the
// connection after it (an oversize length prefix the broker would wait to
// skip).
func (g *floodGen) frame() ([]byte, bool) {
	switch k := g.rng.IntN(100); {
	case k < 15: // random bytes
		return g.bytes(256), false
	case k < 30: // a valid length prefix around a garbage command
		body := g.bytes(128)
		f := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
		f = binary.BigEndian.AppendUint32(f, uint32(g.rng.IntN(len(body)+8)))
		return append(f, body...), false
	case k < 45: // a mutated well-formed frame
		f := append([]byte(nil), g.valid[g.rng.IntN(len(g.valid))]...)
		for n := 1 + g.rng.IntN(4); n > 0; n-- {
			f[g.rng.IntN(len(f))] = byte(g.rng.Uint32())
		}
		return f, false
	case k < 48: // an oversize length prefix, then silence
		f := binary.BigEndian.AppendUint32(nil, uint32(6<<20+g.rng.IntN(math.MaxInt32)))
		return append(f, g.bytes(16)...), true
	default: // a random command of a real type
		return g.command(), false
	}
}

func (g *floodGen) connect() []byte {
	b, err := codec.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("flood"), ProtocolVersion: proto.Int32(20)}})
	if err != nil {
		panic(err)
	}
	return b
}

// floodConn is a connection the flood writes to while a goroutine drains
// (and discards) what the broker answers.
type floodConn struct {
	c    net.Conn
	gone chan struct{} // closed when the broker closed the connection
}

func drainFlood(c net.Conn) *floodConn {
	fc := &floodConn{c: c, gone: make(chan struct{})}
	go func() {
		io.Copy(io.Discard, c)
		close(fc.gone)
	}()
	return fc
}

// Hostile-input issue: 10,000 random and malformed frames to a live
// broker; it still serves a normal client, and its resident memory grew by
// less than 64 MiB.
func TestMalformedFrameFlood(t *testing.T) {
	s := standalone(t)
	addr := strings.TrimPrefix(s.URL, "pulsar://")
	roundTrip(t, s.URL) // warm up: a topic loaded, a ledger open
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	flood(t, s.Proc, dial, func(g *floodGen) []byte { return g.connect() })
	roundTrip(t, s.URL)
	if n := metricValue(t, s.AdminURL, "meridian_broker_rejected_frames_total", ""); n == 0 {
		t.Fatal("no frame was counted as rejected")
	}
}

// The same flood over TLS against a broker with token authentication and
// authorization on: connections CONNECT with a super-user token, a token
// of a role without permissions, a garbage token or none, so the frames
// reach the authentication, the authorization checks and the handlers
// behind them. The per-IP limit on authentication failures is off here:
// with it the flood's garbage tokens would throttle 127.0.0.1 after 100,
// and the frames would no longer reach the authentication
// (TestAuditTrailAndAuthFailureLimit tests the limit).
func TestMalformedFrameFloodTLSAuth(t *testing.T) {
	s := testutil.StartSecureStandalone(t, t.TempDir(), "--auth-failure-limit", "-1")
	addr := strings.TrimPrefix(s.URL, "pulsar+ssl://")
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	su := secureClient(t, s, pulsar.NewAuthenticationToken(s.Token(testutil.SuperUser, time.Hour)))
	secureRoundTrip(t, su)
	tokens := []string{s.Token(testutil.SuperUser, time.Hour), s.Token("nobody", time.Hour), "garbage.token.x", ""}
	dial := func() net.Conn {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	flood(t, s.Proc, dial, func(g *floodGen) []byte {
		cm := &pb.CommandConnect{ClientVersion: proto.String("flood"), ProtocolVersion: proto.Int32(20)}
		if tok := tokens[g.rng.IntN(len(tokens))]; tok != "" {
			cm.AuthMethodName, cm.AuthData = proto.String("token"), []byte(tok)
		}
		b, err := codec.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: cm})
		if err != nil {
			panic(err)
		}
		return b
	})
	secureRoundTrip(t, su)
	if n := secureMetric(t, s, "meridian_broker_auth_failures_total", `reason="invalid"`); n == 0 {
		t.Fatal("no garbage token was counted")
	}
}

// secureRoundTrip produces and consumes 100 messages with client c.
func secureRoundTrip(t *testing.T, c pulsar.Client) {
	t.Helper()
	topic := topicName(t)
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "rt", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 100, nil)
	receiveN(t, cons, 100, true)
}

// flood sends 10,000 random and malformed frames to the broker process
// proc over connections from dial (most of which first send connect's
// CONNECT), then checks it still runs and its resident memory grew by
// less than 64 MiB.
func flood(t *testing.T, proc *testutil.Proc, dial func() net.Conn, connect func(*floodGen) []byte) {
	t.Helper()
	const frames, workers = 10000, 8
	before := rssBytes(t, proc.Pid())
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (rerun with the same seed to reproduce the frames)", seed)
	var wg sync.WaitGroup
	var mu sync.Mutex
	reconnects := 0
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := &floodGen{rng: rand.New(rand.NewPCG(seed, uint64(w)))}
			g.valid = [][]byte{connect(g), sendFrame(t, 1, 1, []byte("x"))}
			for range 8 {
				g.valid = append(g.valid, g.command())
			}
			var fc *floodConn
			for i := 0; i < frames/workers; i++ {
				if fc != nil {
					select {
					case <-fc.gone:
						fc.c.Close()
						fc = nil
					default:
					}
				}
				if fc == nil {
					fc = drainFlood(dial())
					mu.Lock()
					reconnects++
					mu.Unlock()
					if g.rng.IntN(10) != 0 { // most connections CONNECT first
						fc.c.Write(connect(g))
					}
				}
				f, end := g.frame()
				fc.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				_, err := fc.c.Write(f)
				if err != nil || end {
					fc.c.Close()
					<-fc.gone
					fc = nil
				}
			}
			if fc != nil {
				fc.c.Close()
				<-fc.gone
			}
		}()
	}
	wg.Wait()
	t.Logf("%d frames over %d connections", frames, reconnects)
	if exited, err := proc.Exited(); exited {
		t.Fatalf("the broker exited: %v", err)
	}
	after := rssBytes(t, proc.Pid())
	growth := after - before
	t.Logf("RSS before %d MiB, after %d MiB, growth %.1f MiB", before>>20, after>>20, float64(growth)/(1<<20))
	if growth >= 64<<20 {
		t.Fatalf("resident memory grew by %d MiB (limit 64 MiB)", growth>>20)
	}
}

// Hostile-input issue: a connection past --max-connections-per-ip is
// closed at accept, a producer past --max-producers-per-topic is answered
// ProducerBusy, and both are counted.
func TestConnectionAndProducerLimits(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--max-connections-per-ip", "3", "--max-producers-per-topic", "2")
	topic := topicName(t)

	r1 := dialRaw(t, s.URL)
	for id := uint64(1); id <= 2; id++ {
		if c := r1.producer(topic, id); c.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
			t.Fatalf("producer %d: %v %v", id, c.GetType(), c.GetError())
		}
	}
	c := r1.producer(topic, 3)
	if c.GetType() != pb.BaseCommand_ERROR || c.GetError().GetError() != pb.ServerError_ProducerBusy {
		t.Fatalf("third producer: got %v %v, want ERROR ProducerBusy", c.GetType(), c.GetError())
	}
	// The Go client reports it and creates nothing.
	client := newPulsarClient(t, s.URL) // connection 2
	if _, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "ProducerBusy") {
		t.Fatalf("Go producer past the limit: err = %v, want ProducerBusy", err)
	}
	// Room again once one closes.
	r1.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(9)}})
	if c := r1.next(); c.Cmd.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("close producer: %v", c.Cmd.GetType())
	}
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("producer after one closed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	if n := metricValue(t, s.AdminURL, "meridian_broker_limit_exceeded_total", `limit="producers_per_topic"`); n < 2 {
		t.Fatalf("producers_per_topic counted %v, want >= 2", n)
	}

	// Connections: r1 and the Go client's hold 2 of 3.
	r3 := dialRaw(t, s.URL)
	over := dialFlood(t, strings.TrimPrefix(s.URL, "pulsar://"))
	defer over.c.Close()
	over.c.Write((&floodGen{}).connect())
	select {
	case <-over.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("a fourth connection from one IP was not closed")
	}
	if n := metricValue(t, s.AdminURL, "meridian_broker_limit_exceeded_total", `limit="connections_per_ip"`); n < 1 {
		t.Fatalf("connections_per_ip counted %v", n)
	}
	r1.ping()
	r3.ping()
	r3.c.Close()
	// Its slot frees once the broker sees it close.
	testutil.Eventually(t, 10*time.Second, "a connection accepted again", func() bool {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(s.URL, "pulsar://"), 5*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.Write((&floodGen{}).connect())
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = codec.NewDecoder(c, 1<<20).Next()
		return err == nil
	})
}

// Hostile-input issue: a client that sends requests and never reads the
// answers meets TCP back-pressure (the broker stops reading it) instead of
// growing the broker's memory; once it reads, the connection serves again.
func TestNonReadingClientIsPaused(t *testing.T) {
	s := standalone(t)
	before := rssBytes(t, s.Pid())
	r := dialRaw(t, s.URL)
	ping, err := codec.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat(ping, (64<<10)/len(ping))
	const most = 256 << 20 // without back-pressure the broker reads all of it
	written := 0
	for written < most {
		r.c.SetWriteDeadline(time.Now().Add(3 * time.Second))
		n, err := r.c.Write(chunk)
		written += n
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d MiB of PINGs before the broker stopped reading", written>>20)
	if written >= most {
		t.Fatalf("the broker read %d MiB of PINGs whose answers were never read", written>>20)
	}
	growth := rssBytes(t, s.Pid()) - before
	t.Logf("RSS growth %.1f MiB", float64(growth)/(1<<20))
	if growth >= 64<<20 {
		t.Fatalf("resident memory grew by %d MiB", growth>>20)
	}
	if n := metricValue(t, s.AdminURL, "meridian_broker_limit_exceeded_total", `limit="output_queue_bytes"`); n < 1 {
		t.Fatalf("output_queue_bytes counted %v", n)
	}
	// Reading the answers lets it go on: every PING (the last one perhaps
	// only partly written) is answered, then a fresh ping round trip.
	go func() {
		r.c.SetWriteDeadline(time.Now().Add(time.Minute))
		r.c.Write(ping[written%len(ping):]) // complete the partial frame
	}()
	for pongs := 0; pongs < (written+len(ping)-1)/len(ping); pongs++ {
		if f := r.next(); f.Cmd.GetType() != pb.BaseCommand_PONG {
			t.Fatalf("got %v", f.Cmd.GetType())
		}
	}
	r.ping()
}

func dialFlood(t *testing.T, addr string) *floodConn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return drainFlood(c)
}
