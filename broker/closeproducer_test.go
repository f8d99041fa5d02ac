package broker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/cluster"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// testConn is a connected conn of a minimal broker, with one producer
// (id 1) of a loaded topic; its answers stay queued (outQ) for the test
// to read (no writer goroutine).
func testConn(t *testing.T) (*conn, *Producer) {
	t.Helper()
	return testConnOf(t, testBroker())
}

// testBroker is a broker with no store, listener or ledgers.
func testBroker() *Broker {
	b := &Broker{cfg: Config{Cluster: "east"}.withDefaults(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), topics: map[string]*topicSlot{}}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.metrics = newMetrics("east", b)
	b.np = newNPRegistry(b)
	return b
}

func testConnOf(t *testing.T, b *Broker) (*conn, *Producer) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	c := newConn(b, server)
	c.connected = true
	tn, err := meta.ParseTopic("persistent://public/default/t")
	if err != nil {
		t.Fatal(err)
	}
	topic := newTopic(b, tn, nil, meta.Policies{})
	p := &Producer{id: 1, name: "p", conn: c, topic: topic, pending: make(chan struct{}, 10)}
	if _, err := topic.addProducer(context.Background(), p, nil); err != nil {
		t.Fatal(err)
	}
	c.producers[p.id] = p
	return c, p
}

// sendCmd is a SEND of producer id as the reader goroutine decodes it.
func sendCmd(t *testing.T, id, seq uint64) codec.Frame {
	t.Helper()
	msg, err := codec.EncodeMessage(&pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(1)}, []byte("m"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := codec.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(id), SequenceId: proto.Uint64(seq), NumMessages: proto.Int32(1)}}, nil, msg)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := codec.NewDecoder(bytes.NewReader(f), 0).Next()
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

// queued decodes and empties what the conn queued for the client.
func queued(t *testing.T, c *conn) []*pb.BaseCommand {
	t.Helper()
	c.outMu.Lock()
	q := c.outQ
	c.outQ = nil
	c.outMu.Unlock()
	d := codec.NewDecoder(bytes.NewReader(bytes.Join(q, nil)), 0)
	var out []*pb.BaseCommand
	for {
		f, err := d.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f.Cmd)
	}
}

// The race behind TestOwnerBrokerLoss/terminated's flake (the producer's
// sends timed out, the new owner never saw it): a topic unloading closes
// its producers (closeByBroker: the producer leaves the connection, then
// CLOSE_PRODUCER is queued) while the client still has SENDs in flight.
// A SEND read once the producer is gone was answered SEND_ERROR
// NotAllowedError — and pulsar-client-go (v0.19) handles that by taking
// the producer off the connection without reconnecting it, so the
// CLOSE_PRODUCER behind it found no producer and the client never
// reconnected (nor on the connection's close: the producer was no longer
// on it). Here the SEND is handled right after closeByBroker, as the
// reader goroutine does in the race: it must get no answer at all (the
// client resends it after reconnecting), and the CLOSE_PRODUCER must be
// the only frame for the producer.
func TestSendAfterCloseByBrokerIsNotRefused(t *testing.T) {
	c, p := testConn(t)
	p.closeByBroker(&BrokerInfo{ServiceURL: "pulsar://other:6650"})
	for seq := uint64(5); seq < 8; seq++ {
		if !c.handle(sendCmd(t, 1, seq)) {
			t.Fatal("the SEND closed the connection")
		}
	}
	cmds := queued(t, c)
	if len(cmds) != 1 || cmds[0].GetType() != pb.BaseCommand_CLOSE_PRODUCER {
		var types []string
		for _, cmd := range cmds {
			types = append(types, cmd.GetType().String()+" "+cmd.GetSendError().GetError().String())
		}
		t.Fatalf("the client got %v; want only CLOSE_PRODUCER (a SEND_ERROR NotAllowedError makes the Go client drop the producer without reconnecting)", types)
	}
	if got := cmds[0].GetCloseProducer().GetAssignedBrokerServiceUrl(); got != "pulsar://other:6650" {
		t.Fatalf("CLOSE_PRODUCER names %q", got)
	}
}

// A producer id the broker never closed on this connection (or one the
// client closed itself) is still refused: that is a client error, not a
// SEND in flight across an unload.
func TestSendOfUnknownProducerIsRefused(t *testing.T) {
	c, p := testConn(t)
	p.closeByBroker(nil)
	queued(t, c)
	for _, id := range []uint64{1, 2} {
		if id == 1 {
			c.handleCloseProducer(&pb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(9)})
			queued(t, c) // its SUCCESS
		}
		c.handle(sendCmd(t, id, 1))
		cmds := queued(t, c)
		if len(cmds) != 1 || cmds[0].GetSendError().GetError() != pb.ServerError_NotAllowedError {
			t.Fatalf("SEND of unknown producer %d answered %v, want SEND_ERROR NotAllowedError", id, cmds)
		}
	}
}

// A graceful hand-off releases the bundle and points the clients at the
// new owner even when a topic's unload does not finish within the
// hand-off's context (a wait that never ends, here a lock the unload
// needs held by someone else): keeping the bundle left its topics served
// by nobody until this broker's lease expired — and a stopping broker's
// lease lives until its process exits. On a real etcd (embedded).
func TestMoveBundleReleasesWhenUnloadDoesNotFinish(t *testing.T) {
	store := testutil.Store(t, testutil.StartEtcd(t), "/east")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	b := testBroker()
	defer b.cancel()
	b.cfg.BrokerID, b.cfg.OwnershipTTL, b.cfg.Store = "broker-1", 5*time.Second, store
	o := &ownership{b: b, owned: map[string]bundle{}, info: BrokerInfo{ID: "broker-1"}, store: store, regKey: "/brokers/broker-1"}
	var err error
	if o.lease, err = o.register(ctx); err != nil {
		t.Fatal(err)
	}
	b.own = o
	bd := bundle{ns: "public/default", lower: 0, upper: 0xffffffff}
	if mine, _, err := o.acquire(ctx, bd); err != nil || !mine {
		t.Fatalf("acquire: mine=%v err=%v", mine, err)
	}
	c, p := testConnOf(t, b)
	p.topic.bundle = bd
	// This unload never finishes (its goroutine stays blocked until the
	// test binary exits), as one waiting for a lock held elsewhere.
	p.topic.unloadHook = func() { select {} }

	mctx, mcancel := context.WithTimeout(context.Background(), time.Second)
	defer mcancel()
	done := make(chan struct{})
	go func() {
		b.moveBundle(mctx, bd, []*Topic{p.topic}, &BrokerInfo{ServiceURL: "pulsar://broker-2:6650"})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("moveBundle still blocked 15 s after its 1 s context ended: the bundle stays owned by a broker that no longer serves it")
	}
	if _, err := store.Get(ctx, bd.key()); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("bundle key after the move: %v, want it released", err)
	}
	if o.owns(bd) {
		t.Fatal("the broker still counts the bundle as its own")
	}
	cmds := queued(t, c)
	if len(cmds) != 1 || cmds[0].GetCloseProducer().GetAssignedBrokerServiceUrl() != "pulsar://broker-2:6650" {
		t.Fatalf("the producer's client got %v, want CLOSE_PRODUCER naming the new owner", cmds)
	}
}

// A hand-off's CLOSE_PRODUCER names the new owner in the listener the
// client uses (listeners.go): the one of the socket the connection
// arrived on, or the one its last LOOKUP was answered in; while that is
// not known and the broker has named listeners it names no owner (the
// client looks up again, naming its listener) — never an internal address
// to a client outside. A broker without listeners names the owner's URL.
func TestCloseProducerNamesTheNewOwnerInTheClientsListener(t *testing.T) {
	target := &BrokerInfo{ServiceURL: "pulsar://10.0.0.2:6650",
		Listeners: meta.Listeners{"internal": "pulsar://10.0.0.2:6650", "external": "pulsar://b2.example.com:6652"}}
	withListeners := func() *Broker {
		b := testBroker()
		b.lst.byName = meta.Listeners{"internal": "pulsar://10.0.0.1:6650", "external": "pulsar://b1.example.com:6652"}
		b.lst.internal = "internal"
		return b
	}
	for _, c := range []struct {
		name   string
		b      *Broker
		bind   string // the socket's listener
		lookup *string
		want   string
	}{
		{"external socket", withListeners(), "external", nil, "pulsar://b2.example.com:6652"},
		{"main socket, no lookup", withListeners(), "", nil, ""},
		{"main socket, lookup naming external", withListeners(), "", proto.String("external"), "pulsar://b2.example.com:6652"},
		{"main socket, lookup naming none", withListeners(), "", proto.String(""), "pulsar://10.0.0.2:6650"},
		{"external socket, lookup naming internal", withListeners(), "external", proto.String("internal"), "pulsar://10.0.0.2:6650"},
		{"no listeners", testBroker(), "", nil, "pulsar://10.0.0.2:6650"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, p := testConnOf(t, c.b)
			conn.bindListener = c.bind
			if c.lookup != nil {
				conn.lookupListener(*c.lookup)
			}
			p.closeByBroker(target)
			cmds := queued(t, conn)
			if len(cmds) != 1 || cmds[0].GetType() != pb.BaseCommand_CLOSE_PRODUCER {
				t.Fatalf("got %v", cmds)
			}
			if got := cmds[0].GetCloseProducer().GetAssignedBrokerServiceUrl(); got != c.want {
				t.Errorf("assigned URL %q, want %q", got, c.want)
			}
		})
	}
}
