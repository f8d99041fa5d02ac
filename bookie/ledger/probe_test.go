package ledger

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/metapb"
	"google.golang.org/grpc"
)

// infoCounter is a bookie that answers Info only, counting the calls.
type infoCounter struct {
	bookiepb.UnimplementedBookieServer
	id    string
	calls atomic.Int64
}

func (s *infoCounter) Info(context.Context, *bookiepb.InfoRequest) (*bookiepb.InfoResponse, error) {
	s.calls.Add(1)
	time.Sleep(20 * time.Millisecond) // the callers overlap
	return &bookiepb.InfoResponse{BookieId: s.id}, nil
}

// A broker holds a writer per topic; when a bookie dies, every writer
// whose change finds no spare asks whether it is back, each retry round.
// One Info probe per bookie per backProbeFresh answers them all.
func TestBackProbeIsSharedByTheWriters(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	bk := &infoCounter{id: "b1"}
	bookiepb.RegisterBookieServer(srv, bk)
	go srv.Serve(lis)
	defer srv.Stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &Client{cfg: Config{Bookies: readOnlyBookies{}}, pool: pool{conns: map[string]*bookieConn{}}, ctx: ctx}
	defer c.pool.closeAll()
	ref := &metapb.BookieRef{Id: "b1", Addr: lis.Addr().String()}

	var wg sync.WaitGroup
	var yes atomic.Int64
	for range 200 {
		wg.Go(func() {
			if c.answersShared(ref) {
				yes.Add(1)
			}
		})
	}
	wg.Wait()
	if yes.Load() != 200 {
		t.Fatalf("%d of 200 writers were told the bookie is back", yes.Load())
	}
	if n := bk.calls.Load(); n != 1 {
		t.Fatalf("200 writers asked at once: %d Info calls, want 1", n)
	}
	if !c.answersShared(ref) || bk.calls.Load() != 1 {
		t.Fatalf("asked again at once: %d Info calls, want still 1", bk.calls.Load())
	}
	time.Sleep(backProbeFresh + 50*time.Millisecond)
	if !c.answersShared(ref) || bk.calls.Load() != 2 {
		t.Fatalf("asked after %v: %d Info calls, want 2 (a fresh probe)", backProbeFresh, bk.calls.Load())
	}
	// Another id, or a bookie that answers as someone else, is not back.
	if c.answersShared(&metapb.BookieRef{Id: "b2", Addr: lis.Addr().String()}) {
		t.Fatal("a bookie answering as b1 was taken for b2")
	}
}
