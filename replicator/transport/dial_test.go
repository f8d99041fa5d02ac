package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/replicator"
)

// nopTarget accepts every stream and applies nothing.
type nopTarget struct{}

func (nopTarget) ApplyBatch(replicator.Batch, *ReplyQueue) error                        { return nil }
func (nopTarget) FreshAck(a replicator.Ack) replicator.Ack                              { return a }
func (nopTarget) ApplySubscription(context.Context, string, *replpb.SubscriptionUpdate) {}

type welcomeServer struct {
	replpb.UnimplementedReplicationServer
}

func (welcomeServer) Replicate(st replpb.Replication_ReplicateServer) error {
	return Serve(st, "west", "west-1", func(context.Context, Hello) (Target, string, error) { return nopTarget{}, "", nil })
}

// Requirement (issue 30, item 9): a replication server holds at most
// MaxStreamsPerConn streams per connection, and a broker replicating
// more topics than that to one address (one long-lived stream per
// topic) does not wait for a stream to end: the Dialer opens another
// connection. Real gRPC over TCP: MaxStreamsPerConn + 1 streams are all
// welcomed, over two connections; once streams end their room is used
// again before a new connection is made.
func TestStreamsPastTheBoundOpenAnotherConnection(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer()
	replpb.RegisterReplicationServer(srv, welcomeServer{})
	go srv.Serve(lis)
	defer srv.Stop()
	addr := lis.Addr().String()

	d := NewDialer()
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := MaxStreamsPerConn + 1
	streams := make([]*Stream, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				// Each open must not wait for another stream to end.
				s, err := d.Open(ctx, addr, Hello{Source: "east", Target: "west", Topic: fmt.Sprintf("persistent://t/ns/%d", i)})
				if err != nil {
					errs <- fmt.Errorf("stream %d: %w", i, err)
					return
				}
				streams[i] = s
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d streams open in %v", n, time.Since(start).Round(time.Millisecond))
	if c := d.connCount(addr); c != 2 {
		t.Fatalf("%d streams over %d connections, want 2 (%d per connection)", n, c, MaxStreamsPerConn)
	}
	// Streams that end free their room: 10 closed, 10 more opened, no
	// third connection.
	for _, s := range streams[:10] {
		s.Close()
	}
	for i := range 10 {
		s, err := d.Open(ctx, addr, Hello{Source: "east", Target: "west", Topic: fmt.Sprintf("persistent://t/ns/again-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	if c := d.connCount(addr); c != 2 {
		t.Fatalf("after streams ended and as many opened: %d connections, want 2", c)
	}
	for _, s := range streams {
		s.Close()
	}
}
