package failoverctl

import (
	"net"
	"testing"

	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// A cross-region lookup sends clients only to a broker that answers the
// protocol's handshake: a killed one (connection refused) and a paused
// one (its kernel accepts the connection, nothing answers) are skipped.
func TestReachableURL(t *testing.T) {
	serve := func(answer bool) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lis.Close() })
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					f, err := codec.NewDecoder(c, 1<<20).Next()
					if err != nil || f.Cmd.GetType() != pb.BaseCommand_CONNECT {
						return
					}
					if !answer {
						c.Read(make([]byte, 1)) // paused: holds the connection, says nothing
						return
					}
					b, _ := codec.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{ServerVersion: proto.String("test")}})
					c.Write(b)
				}()
			}
		}()
		return "pulsar://" + lis.Addr().String()
	}
	live, paused := serve(true), serve(false)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	killed := "pulsar://" + dead.Addr().String()
	dead.Close()
	b := &Shell{}
	for range 5 {
		if got := b.reachableURL([]string{killed, paused, live}); got != live {
			t.Fatalf("reachable among killed, paused and live: %q, want %q", got, live)
		}
	}
	if got := (&Shell{}).reachableURL([]string{killed, paused}); got != "" {
		t.Fatalf("a killed or paused broker was called reachable: %q", got)
	}
}
