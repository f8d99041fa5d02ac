package georep

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/proto/replpb"
)

// checkHandshakeRefusals opens replication streams to a broker's
// replication address that it must refuse, each with a clear message: an
// incompatible protocol version, a stream meant for another region, and a
// source region that is not one of the namespace's regions (a region
// cannot write into a namespace it is not part of).
func checkHandshakeRefusals(t *testing.T, addr, region, topic string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cases := []struct {
		name  string
		hello *replpb.Hello
		code  codes.Code
		msg   string
	}{
		{"incompatible version", &replpb.Hello{Version: 2, Source: "east", Target: region, Topic: topic}, codes.FailedPrecondition, "version"},
		{"misrouted", &replpb.Hello{Version: replpb.ProtocolVersion_PROTOCOL_VERSION_1, Source: "east", Target: "elsewhere", Topic: topic}, codes.FailedPrecondition, "not elsewhere"},
		{"foreign region", &replpb.Hello{Version: replpb.ProtocolVersion_PROTOCOL_VERSION_1, Source: "mars", Target: region, Topic: topic}, codes.PermissionDenied, "mars may not write"},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := replpb.NewReplicationClient(conn).Replicate(ctx)
		if err == nil {
			err = st.Send(&replpb.ReplicateRequest{Msg: &replpb.ReplicateRequest_Hello{Hello: c.hello}})
		}
		var resp *replpb.ReplicateResponse
		if err == nil {
			resp, err = st.Recv()
		}
		cancel()
		s, _ := status.FromError(err)
		if err == nil || s.Code() != c.code || !strings.Contains(s.Message(), c.msg) {
			t.Fatalf("%s: got %v / %v, want %v containing %q", c.name, resp, err, c.code, c.msg)
		}
		t.Logf("%s refused: %s", c.name, s.Message())
	}
}
