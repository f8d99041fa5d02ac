package broker

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/broker/codec"
	"github.com/meridian-mq/meridian/broker/meta"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	dto "github.com/prometheus/client_model/go"
)

// Hostile-input issue: requests in progress past
// MaxPendingRequestsPerConnection are answered ERROR ServiceNotReady
// (retriable) and counted; finishing one makes room.
func TestPendingRequestsLimit(t *testing.T) {
	b := &Broker{cfg: Config{MaxPendingRequestsPerConnection: 2}.withDefaults(), log: slog.Default()}
	b.metrics = newMetrics("test", b)
	nc, peer := net.Pipe()
	defer nc.Close()
	defer peer.Close()
	c := newConn(b, nc)

	if !c.beginRequest(1) || !c.beginRequest(2) {
		t.Fatal("requests within the limit refused")
	}
	if c.beginRequest(3) {
		t.Fatal("a third request admitted with a limit of 2")
	}
	if len(c.outQ) != 1 {
		t.Fatalf("%d frames queued, want the one ERROR", len(c.outQ))
	}
	f, err := codec.NewDecoder(bytes.NewReader(c.outQ[0]), 1<<20).Next()
	if err != nil {
		t.Fatal(err)
	}
	if e := f.Cmd.GetError(); f.Cmd.GetType() != pb.BaseCommand_ERROR || e.GetRequestId() != 3 || e.GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("answer %v %v, want ERROR ServiceNotReady for request 3", f.Cmd.GetType(), e)
	}
	var m dto.Metric
	if err := b.metrics.limitExceeded.WithLabelValues(limitPendingRequests).Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("pending_requests_per_connection counted %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
	c.endRequest()
	if !c.beginRequest(4) {
		t.Fatal("no room after a request ended")
	}
}

func TestUnderLimit(t *testing.T) {
	for _, tc := range []struct {
		n, limit int
		want     bool
	}{{0, 1, true}, {1, 1, false}, {9999, 10000, true}, {10000, 10000, false}, {1 << 30, -1, true}} {
		if got := underLimit(tc.n, tc.limit); got != tc.want {
			t.Errorf("underLimit(%d, %d) = %v", tc.n, tc.limit, got)
		}
	}
}

// Hostile-input issue: a subscription name is a metrics label and an
// admin JSON string; one that is not UTF-8 (which would fail every
// scrape) or holds control characters is refused with NotAllowed.
func TestValidSubscription(t *testing.T) {
	for _, ok := range []string{"sub", "reader-1a2b", "a/b", "..", "ünï"} {
		if err := meta.ValidSubscription(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "\xff\xfe", "a\x00b", "line\nbreak", strings.Repeat("s", 1025)} {
		err := meta.ValidSubscription(bad)
		if err == nil || serverError(err) != pb.ServerError_NotAllowedError {
			t.Errorf("%q: err %v, want NotAllowed", bad, err)
		}
	}
}
