package broker_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/protobuf/proto"
)

// unknownFrame is a frame of BaseCommand{type: 999}, a type no protocol
// version defines.
func unknownFrame() []byte {
	body := protoVarintField(1, 999)
	f := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	f = binary.BigEndian.AppendUint32(f, uint32(len(body)))
	return append(f, body...)
}

// dialUnconnected opens a protocol connection that has not sent CONNECT.
func dialUnconnected(t *testing.T, url string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "pulsar://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, dec: codec.NewDecoder(c, 64<<20)}
}

// Issue 30, item 4: before CONNECTED only a CONNECT is taken. An
// unknown-type frame (which used to be skipped, so one every 25 s kept a
// connection open for ever), any other command, an AUTH_RESPONSE no
// challenge asked for, and an oversize frame (here with the pre-CONNECT
// frame limit off, so it is the one of CONNECTED connections) close the
// connection; after CONNECT an unknown frame is still skipped.
func TestOnlyConnectBeforeConnected(t *testing.T) {
	// --handshake-timeout -1: what closes the connections is the frame.
	s := testutil.StartStandalone(t, t.TempDir(), "--max-unauthenticated-frame-bytes", "-1", "--handshake-timeout", "-1s")
	cmd := func(c *pb.BaseCommand) []byte {
		b, err := codec.AppendCommand(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"unknown-type", unknownFrame()},
		{"ping", cmd(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})},
		{"lookup", cmd(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String("persistent://public/default/x"), RequestId: proto.Uint64(1)}})},
		{"auth-response", cmd(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_RESPONSE.Enum(), AuthResponse: &pb.CommandAuthResponse{Response: &pb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte("x")}}})},
		{"oversize", sendFrame(t, 1, 1, make([]byte, 6<<20))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialUnconnected(t, s.URL)
			go func() {
				r.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
				r.c.Write(tc.frame)
			}()
			start := time.Now()
			if !r.closedByBroker() {
				t.Fatalf("%s before CONNECT: the connection is still open after 10 s", tc.name)
			}
			t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
		})
	}
	r := dialRaw(t, s.URL)
	r.write(unknownFrame())
	r.ping() // CONNECTED: skipped, the connection serves on
}

// Issue 30, item 4: a line a remote peer can trigger is logged at most
// once per kind every 10 s: 20,000 unknown frames on a CONNECTED
// connection, and 200 connections closed for an unknown frame before
// CONNECT, write a handful of lines to the broker's log at level info
// (each frame wrote a WARN line).
func TestPeerTriggeredLogLinesAreRateLimited(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--log-level", "info")
	logged := func(substr string) int { // lines
		b, err := os.ReadFile(s.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range bytes.Split(b, []byte("\n")) {
			if bytes.Contains(l, []byte(substr)) {
				n++
			}
		}
		return n
	}
	atMost := func(what string, before, want int) {
		t.Helper()
		n := logged("unknown command") - before
		t.Logf("%d log lines for %s", n, what)
		if n > want {
			b, _ := os.ReadFile(s.LogPath())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Fatalf("%d lines logged for %s, want at most %d; the last ones:\n%s", n, what, want, strings.Join(lines[max(0, len(lines)-3):], "\n"))
		}
	}
	before := logged("unknown command")
	r := dialRaw(t, s.URL)
	r.write(bytes.Repeat(unknownFrame(), 20000))
	r.ping() // every frame before it has been read
	atMost("20,000 unknown frames after CONNECT", before, 1)
	for range 200 {
		u := dialUnconnected(t, s.URL)
		u.write(unknownFrame())
		if !u.closedByBroker() {
			t.Fatal("an unknown frame before CONNECT did not close the connection")
		}
	}
	if n := metricValue(t, s.AdminURL, "meridian_broker_rejected_frames_total", ""); n < 20200 {
		t.Fatalf("rejected frames counted %v, want >= 20200", n)
	}
	atMost("20,000 unknown frames after CONNECT and 200 connections closed for one before", before, 2)
}
